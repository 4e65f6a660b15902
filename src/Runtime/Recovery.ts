/**
 * Crash recovery: at start, every cell with a run that is not terminal is restored (a new cell
 * generation), and a cell starts the actors of its unfinished runs (src/Runtime/Cell.ts), which
 * continue from each run's last committed step (see RunActor). Runs waiting for an approval park
 * again: no actor until the decision or the expiry.
 */
import { Effect, Layer } from "effect"

import { Cells } from "../Cells/Cells.js"
import { GetGeneration } from "../Cells/Protocol.js"
import { cellKey } from "../Kernel/Principal.js"
import { RunStore } from "../Runs/RunStore.js"

export const recoverRuns = Effect.gen(function*() {
  const repo = yield* RunStore
  const cells = yield* Cells
  const open = yield* Effect.orDie(repo.openRuns)
  const byCell = new Map(open.map((run) => [cellKey({ tenantId: run.tenant_id, environment: run.environment }), run] as const))
  yield* Effect.forEach(
    byCell.values(),
    (run) => cells.send({ tenantId: run.tenant_id, environment: run.environment }, new GetGeneration()),
    { concurrency: 16, discard: true }
  )
  if (open.length > 0) yield* Effect.logInfo(`recovered ${open.length} unfinished run(s) in ${byCell.size} cell(s)`)
}).pipe(Effect.withSpan("Recovery.recoverRuns"))

export const RecoveryLive = Layer.effectDiscard(Effect.forkDaemon(recoverRuns))
