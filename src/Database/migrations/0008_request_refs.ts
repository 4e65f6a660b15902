import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A run remembers the idempotent request that admitted it, and an approval the request that
 * decided it (a digest of the idempotency scope). A retry that takes over the reservation of a
 * request that died after its commit (before its response was stored) answers with that run or
 * that decision, instead of admitting a second run or refusing its own decision.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runs ADD COLUMN idempotency_ref text`
  yield* sql`CREATE INDEX runs_idempotency_ref ON runs (tenant_id, environment, idempotency_ref) WHERE idempotency_ref IS NOT NULL`
  yield* sql`ALTER TABLE approvals ADD COLUMN decided_ref text`
})
