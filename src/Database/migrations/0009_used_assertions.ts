import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * `used_assertions` (D19): each identity provider assertion (its `jti`, per environment and
 * issuer) makes one actor session. A row is needed only while its assertion could still be
 * accepted, until `expires_at` (the earlier of its `iat` + 5 minutes and its `exp`, plus the clock
 * tolerance); later rows are swept (`used_assertions_expiry`).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE used_assertions (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      issuer text NOT NULL,
      jti text NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment, issuer, jti),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX used_assertions_expiry ON used_assertions (expires_at)`
})
