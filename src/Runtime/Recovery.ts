/**
 * Recovery: every unfinished run has a running actor, on the node that owns its cell.
 *
 * - At start, every cell with an unfinished run is woken through the cluster (on whichever runner
 *   owns it); a cell that starts resumes its unfinished runs (src/Runtime/Cell.ts), each from its
 *   last committed step; runs waiting for an approval park again (no actor until the decision or
 *   the expiry).
 * - Then every CLUSTER_SWEEP_SECONDS (real time), each node looks at the unfinished runs of the
 *   cells it owns and hands them to their cell (`ResumeRuns`): a cell that moved here is started,
 *   and a run whose StartRun was lost (its cell was moving) gets its actor.
 */
import { EntityId, Sharding } from "@effect/cluster"
import { Effect, Layer } from "effect"

import { tell } from "../Cells/Cells.js"
import { CellEntity } from "../Cells/Entity.js"
import { type CellId, cellKey, ResumeRuns } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { realPause } from "../Kernel/RealTime.js"
import { traced } from "../Kernel/Spans.js"
import { RunStore } from "../Runs.js"

/** The unfinished runs by cell: `owned` keeps only the cells whose shard this runner holds. */
const openByCell = (owned: boolean) =>
  Effect.gen(function*() {
    const repo = yield* RunStore
    const sharding = yield* Sharding.Sharding
    const byCell = new Map<string, { cell: CellId; runIds: Array<string> }>()
    for (const run of yield* Effect.orDie(repo.openRuns)) {
      const cell = { tenantId: run.tenant_id, environment: run.environment }
      const key = cellKey(cell)
      const entry = byCell.get(key) ?? byCell.set(key, { cell, runIds: [] }).get(key)!
      entry.runIds.push(run.id)
    }
    if (!owned) return [...byCell.values()]
    return [...byCell.entries()].filter(([key]) => {
      const entityId = EntityId.make(key)
      return sharding.hasShardId(sharding.getShardId(entityId, CellEntity.getShardGroup(entityId)))
    }).map(([, entry]) => entry)
  })

const resume = (owned: boolean) =>
  Effect.gen(function*() {
    const open = yield* openByCell(owned)
    // Each cell on its own: one that is moving (unreachable until it has moved) does not hold up the others.
    yield* Effect.forEach(open, ({ cell, runIds }) => tell(cell, new ResumeRuns({ runIds })), { concurrency: 16, discard: true })
    return open
  })

export const recoverRuns = resume(false).pipe(
  Effect.tap((open) =>
    open.length > 0
      ? Effect.logInfo(`recovered ${open.reduce((n, c) => n + c.runIds.length, 0)} unfinished run(s) in ${open.length} cell(s)`)
      : Effect.void
  ),
  traced("Recovery.recoverRuns")
)

/** One pass of the sweep over the cells this node owns. */
export const sweepOwnedCells = resume(true)

export const RecoveryLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const { sweepSeconds } = (yield* AppConfig).cluster
    yield* recoverRuns.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("recovery at start failed; the sweep goes on", cause)),
      Effect.zipRight(
        Effect.forever(
          Effect.zipRight(
            realPause(sweepSeconds * 1000),
            Effect.catchAllCause(sweepOwnedCells, (cause) => Effect.logWarning("cell sweep failed; next pass later", cause))
          )
        )
      ),
      Effect.forkScoped
    )
  })
)
