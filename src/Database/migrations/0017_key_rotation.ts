import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * API key rotation with grace (D17).
 *
 * - `api_keys.expires_at`: when the key stops working (401 `key_expired`), set on the rotated key
 *   (and the keys derived from it) to the end of its grace; null for a key without an expiry.
 * - `api_keys.rotated_from`: on the key a rotation made, the key it replaces.
 * - `api_keys_rotated_from`: a key's successor is found by it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE api_keys
      ADD COLUMN expires_at timestamptz,
      ADD COLUMN rotated_from text REFERENCES api_keys(id)`
  yield* sql`CREATE INDEX api_keys_rotated_from ON api_keys (rotated_from) WHERE rotated_from IS NOT NULL`
})
