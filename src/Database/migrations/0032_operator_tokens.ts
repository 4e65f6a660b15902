import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Personal operator tokens (issue 39): an operator account's bearer tokens for the operator API
 * (`/operator/v1`, `GET /metrics`) and the CLI, made in the operator console after a fresh TOTP
 * code. Only a token's SHA-256 digest is stored, with a visible prefix; a request with one is
 * audited with the account's id (the shared OPERATOR_TOKEN's as `operator`).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE operator_tokens (
    id text PRIMARY KEY,
    account_id text NOT NULL REFERENCES console_accounts(id),
    name text NOT NULL,
    prefix text NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at timestamptz
  )`
  yield* sql`CREATE INDEX operator_tokens_account ON operator_tokens (account_id, created_at)`
})
