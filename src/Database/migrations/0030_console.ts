import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The console (issue 38): its members' accounts (not the API's `users`, who are the customer's own
 * end users), their sessions, the single-use links mailed to them, their TOTP recovery codes, the
 * sign-in attempts that rate-limit them (here, so every node counts the same attempts), the
 * organization a member creates and the pilot application it submitted, and the key that signs
 * the console's links and CSRF tokens (one for every node, made at first start).
 *
 * Secrets are never stored as given: passwords as scrypt hashes, session tokens, link tokens and
 * recovery codes as SHA-256 digests (high-entropy values), the TOTP secret sealed by `Secrets`.
 * `totp_last_step` is the time step of the last TOTP code accepted: a code works once.
 * An audit entry of a member's action names actor type `member`.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE console_organizations (
      id text PRIMARY KEY,
      name text NOT NULL,
      pilot_application_id text REFERENCES pilot_applications(id),
      created_at timestamptz NOT NULL
    )`
  yield* sql`
    CREATE TABLE console_accounts (
      id text PRIMARY KEY,
      email text NOT NULL UNIQUE,
      password_hash text NOT NULL,
      verified_at timestamptz,
      totp_secret text,
      totp_enrolled_at timestamptz,
      totp_last_step bigint,
      organization_id text REFERENCES console_organizations(id),
      created_at timestamptz NOT NULL
    )`
  yield* sql`
    CREATE TABLE console_sessions (
      token_hash bytea PRIMARY KEY,
      account_id text NOT NULL REFERENCES console_accounts(id) ON DELETE CASCADE,
      password_at timestamptz NOT NULL,
      mfa_at timestamptz,
      expires_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX console_sessions_account ON console_sessions (account_id)`
  yield* sql`
    CREATE TABLE console_links (
      token_hash bytea PRIMARY KEY,
      purpose text NOT NULL CHECK (purpose IN ('verify', 'reset', 'invite')),
      account_id text REFERENCES console_accounts(id) ON DELETE CASCADE,
      organization_id text REFERENCES console_organizations(id),
      email text NOT NULL,
      expires_at timestamptz NOT NULL,
      used_at timestamptz
    )`
  yield* sql`
    CREATE TABLE console_recovery_codes (
      account_id text NOT NULL REFERENCES console_accounts(id) ON DELETE CASCADE,
      code_hash bytea NOT NULL,
      used_at timestamptz,
      PRIMARY KEY (account_id, code_hash)
    )`
  yield* sql`
    CREATE TABLE console_sign_in_failures (
      subject text NOT NULL,
      at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX console_sign_in_failures_subject ON console_sign_in_failures (subject, at)`
  // failures older than the window are deleted at each sign-in (ConsoleRepo.failures)
  yield* sql`CREATE INDEX console_sign_in_failures_at ON console_sign_in_failures (at)`
  yield* sql`
    CREATE TABLE console_signing_key (
      id integer PRIMARY KEY CHECK (id = 1),
      key bytea NOT NULL
    )`
  yield* sql`ALTER TABLE audit_entries DROP CONSTRAINT audit_entries_actor_type_check`
  yield* sql`ALTER TABLE audit_entries ADD CONSTRAINT audit_entries_actor_type_check
               CHECK (actor_type IN ('api_key', 'user', 'operator', 'member'))`
})
