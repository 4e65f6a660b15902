import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * D20: the failed authentications of one key are audited at most once a minute.
 * `key_failure_audits`: when a failed authentication with the key was last audited, one row per
 * key that ever failed. The audit trail claims the next entry with a conditional upsert of it
 * (src/Platform/Repo.ts `claimFailureAudit`), so the bound holds across processes; it is audit
 * bookkeeping, kept apart from the key's own row (a refused request changes no resource). It goes
 * with its key.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE key_failure_audits (
      key_id text PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
      audited_at timestamptz NOT NULL
    )`
})
