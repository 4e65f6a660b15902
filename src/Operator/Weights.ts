/**
 * The cell weights an operator set through the operator API (issue 36), on every node: read at
 * start and every SHARE_WEIGHTS_REFRESH_SECONDS into the weights the node's fair shares grant by
 * (the node that took the change applies it at once). A weight set here wins over the node's
 * `CELL_WEIGHTS`; cleared, the cell goes back to it (or to 1).
 */
import { Effect, Layer } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { cellKey } from "../Kernel/Principal.js"
import { realPause } from "../Kernel/RealTime.js"
import { Shares, type Weights } from "../Kernel/Shares.js"
import { type CellWeightRow, OperatorRepo } from "./Repo.js"

/** Makes `weights` the configured ones overlaid with the operator's rows. */
export const applyWeights = (
  weights: Weights,
  configured: ReadonlyMap<string, number>,
  rows: ReadonlyArray<CellWeightRow>
) => {
  const wanted = new Map(configured)
  for (const row of rows) wanted.set(cellKey({ tenantId: row.tenant_id, environment: row.environment }), row.weight)
  for (const key of [...weights.all().keys()]) if (!wanted.has(key)) weights.set(key, undefined)
  for (const [key, weight] of wanted) weights.set(key, weight)
}

export const WeightsRefreshLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const repo = yield* OperatorRepo
    const { weights } = yield* Shares
    const refresh = Effect.flatMap(repo.cellWeights, (rows) => Effect.sync(() => applyWeights(weights, config.shares.cellWeights, rows)))
    // in real time, not on Effect's Clock: a suite moving TestClock by days does not read them once per 10 s of those days
    yield* refresh.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("reading the cells' weights failed; the last ones stay", cause)),
      Effect.zipRight(realPause(config.shares.weightsRefreshSeconds * 1000)),
      Effect.forever,
      Effect.forkScoped
    )
  })
)
