/**
 * Crash recovery: at start, every run that is not terminal gets its cell restored (a new cell
 * generation) and its actor started, which continues from the run's last committed step (see
 * RunActor). Runs waiting for an approval have no actor until the decision or the expiry.
 */
import { Effect, Layer } from "effect"

import { Cells } from "../Cells/Cells.js"
import { StartRun } from "../Cells/Protocol.js"
import { RunStore } from "../Runs/RunStore.js"

export const recoverRuns = Effect.gen(function*() {
  const repo = yield* RunStore
  const cells = yield* Cells
  const open = yield* Effect.orDie(repo.openRuns)
  yield* Effect.forEach(
    open,
    (run) => cells.send({ tenantId: run.tenant_id, environment: run.environment }, new StartRun({ runId: run.id })),
    { concurrency: 16, discard: true }
  )
  if (open.length > 0) yield* Effect.logInfo(`recovered ${open.length} unfinished run(s)`)
}).pipe(Effect.withSpan("Recovery.recoverRuns"))

export const RecoveryLive = Layer.effectDiscard(Effect.forkDaemon(recoverRuns))
