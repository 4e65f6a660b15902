/**
 * The node's fair shares (issue 36) as the operator configures them: the database pool's
 * connections (DB_POOL_SIZE), run steps (SHARE_STEP_CONCURRENCY), calls out
 * (SHARE_OUTBOUND_CONCURRENCY) and file chunks (SHARE_BYTES_CONCURRENCY), each granted per cell,
 * weighted by CELL_WEIGHTS (and the operator API's weights, which win); every grant's wait is a
 * metric (`share_wait_seconds`).
 */
import { Effect, Layer } from "effect"

import { make, makeWeights, Shares } from "../Kernel/Shares.js"
import { recordShareWait } from "../Observability/Metrics.js"
import { AppConfig } from "./AppConfig.js"

export const SharesLive = Layer.effect(
  Shares,
  Effect.map(AppConfig, (config) =>
    make({
      capacities: {
        db: config.dbPoolSize,
        steps: config.shares.stepConcurrency,
        outbound: config.shares.outboundConcurrency,
        bytes: config.shares.bytesConcurrency
      },
      weights: makeWeights(config.shares.cellWeights),
      sliceMillis: config.shares.sliceMillis,
      onGrant: (resource, key, waited) => recordShareWait(resource, config.shares.cellLabels ? key : undefined, waited)
    }))
)
