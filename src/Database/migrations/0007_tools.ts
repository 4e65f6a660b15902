import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Customer tools and human approvals (contract 2.3, 4.1, D9, D10):
 *
 * - `connections`: a registered customer HTTPS connection, `pending_review` until an operator
 *   reviews it; on approval each operation becomes a row of `tools` with an immutable id.
 * - `signing_keys`: the Ed25519 keys a cell signs tool invocations with (private half encrypted);
 *   a rotated-out key stays published until every token it signed has expired.
 * - `environment_settings`: per environment settings (the identity provider of D9).
 * - `actor_sessions`: short-lived actor tokens (hash only) for a user, made from an identity
 *   provider assertion.
 * - `approvals`: one per proposed write, showing the exact operation, input, destination and revision.
 * - `tool_operations`: one per write the service dispatched, its operation id created and committed
 *   before the call; its outcome (or `unknown`) afterwards.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE connections (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL,
      base_url text NOT NULL,
      owner jsonb NOT NULL,
      authentication jsonb NOT NULL,
      operations jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('pending_review', 'active', 'rejected')),
      review_note text,
      reviewed_at timestamptz,
      created_by_key_id text NOT NULL REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX connections_cell ON connections (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE tools (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      connection_id text NOT NULL REFERENCES connections(id),
      name text NOT NULL,
      effect text NOT NULL CHECK (effect IN ('read', 'write')),
      base_url text NOT NULL,
      path text NOT NULL,
      reconciliation_path text,
      description text,
      input_schema jsonb NOT NULL,
      output_schema jsonb NOT NULL,
      created_at timestamptz NOT NULL,
      UNIQUE (connection_id, name)
    )`
  yield* sql`CREATE INDEX tools_cell ON tools (tenant_id, environment, id)`
  // One trigger function for every immutable table from here on (0005's are per table): changes
  // are refused except the DELETEs of a tenant/environment purge (`agent_platform.purging`).
  yield* sql`
    CREATE OR REPLACE FUNCTION immutable_unless_purging() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF TG_OP = 'DELETE' AND current_setting('agent_platform.purging', true) = 'on' THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION '% rows are immutable (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'integrity_constraint_violation';
    END
    $fn$`
  yield* sql`
    CREATE TRIGGER tools_immutable BEFORE UPDATE OR DELETE ON tools
    FOR EACH ROW EXECUTE FUNCTION immutable_unless_purging()`
  yield* sql`
    CREATE TABLE signing_keys (
      kid text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      public_jwk jsonb NOT NULL,
      private_ciphertext bytea NOT NULL,
      private_iv bytea NOT NULL,
      private_tag bytea NOT NULL,
      created_at timestamptz NOT NULL,
      retired_at timestamptz,
      publish_until timestamptz,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`
    CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (tenant_id, environment) WHERE retired_at IS NULL`
  yield* sql`
    CREATE TABLE environment_settings (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      identity_provider jsonb,
      updated_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`
    CREATE TABLE actor_sessions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      user_id text NOT NULL REFERENCES users(id),
      key_id text NOT NULL REFERENCES api_keys(id),
      token_hash text NOT NULL UNIQUE,
      expires_at timestamptz NOT NULL,
      created_at timestamptz NOT NULL
    )`
  yield* sql`
    CREATE TABLE approvals (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      run_id text NOT NULL REFERENCES runs(id),
      tool_call_id text NOT NULL,
      tool_id text NOT NULL REFERENCES tools(id),
      operation jsonb NOT NULL,
      input jsonb NOT NULL,
      destination_url text NOT NULL,
      agent_revision_id text NOT NULL REFERENCES agent_revisions(id),
      status text NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
      reason text,
      decided_by jsonb,
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      decided_at timestamptz,
      UNIQUE (run_id, tool_call_id)
    )`
  yield* sql`CREATE INDEX approvals_cell ON approvals (tenant_id, environment, id)`
  yield* sql`CREATE INDEX approvals_pending ON approvals (expires_at) WHERE status = 'pending'`
  yield* sql`
    CREATE TABLE tool_operations (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      run_id text NOT NULL REFERENCES runs(id),
      tool_call_id text NOT NULL,
      tool_id text NOT NULL REFERENCES tools(id),
      approval_id text REFERENCES approvals(id),
      status text NOT NULL CHECK (status IN ('dispatched', 'succeeded', 'failed', 'not_found', 'unknown')),
      output jsonb,
      error jsonb,
      attempts integer NOT NULL DEFAULT 0,
      next_reconcile_at timestamptz,
      created_at timestamptz NOT NULL,
      completed_at timestamptz,
      UNIQUE (run_id, tool_call_id)
    )`
  yield* sql`CREATE INDEX tool_operations_unknown ON tool_operations (next_reconcile_at) WHERE status = 'unknown'`
})
