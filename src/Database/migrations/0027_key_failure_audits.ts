import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * D20: the failed authentications of one key are audited at most once a minute.
 * `api_keys.failure_audited_at`: when a failed authentication with the key was last audited; the
 * audit trail claims the next entry with a conditional UPDATE of it (src/Platform/Repo.ts
 * `claimFailureAudit`), so the bound holds across processes.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE api_keys ADD COLUMN failure_audited_at timestamptz`
})
