import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A run remembers the idempotent request that admitted it (a digest of its idempotency scope), so
 * a retry that takes over a reservation whose holder died after admitting the run (before the
 * response was stored) answers with that run instead of admitting a second one.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN idempotency_ref text`
  yield* sql`CREATE INDEX runs_idempotency_ref ON runs (tenant_id, environment, idempotency_ref) WHERE idempotency_ref IS NOT NULL`
})
