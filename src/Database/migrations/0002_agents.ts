import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Agents (D12): workspaces, model profiles (credential encrypted: ciphertext, iv, tag), agents and
 * their revisions. Revisions are immutable: a trigger refuses UPDATE, DELETE and TRUNCATE.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE workspaces (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX workspaces_page ON workspaces (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE model_profiles (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL,
      provider text NOT NULL CHECK (provider IN ('openai', 'anthropic', 'openai_compatible', 'scripted')),
      model text NOT NULL,
      settings jsonb NOT NULL,
      credential_ciphertext bytea,
      credential_iv bytea,
      credential_tag bytea,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      CHECK ((credential_ciphertext IS NULL) = (credential_iv IS NULL)
         AND (credential_iv IS NULL) = (credential_tag IS NULL)),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX model_profiles_page ON model_profiles (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE agents (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      workspace_id text NOT NULL REFERENCES workspaces(id),
      name text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX agents_page ON agents (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE agent_revisions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      agent_id text NOT NULL REFERENCES agents(id),
      model_profile_id text NOT NULL REFERENCES model_profiles(id),
      instructions text NOT NULL,
      tool_ids text[] NOT NULL,
      content_hash text NOT NULL,
      created_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX agent_revisions_page ON agent_revisions (agent_id, id)`
  yield* sql`
    CREATE FUNCTION agent_revisions_immutable() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      RAISE EXCEPTION 'agent revisions are immutable (% refused)', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
    END
    $fn$`
  yield* sql`
    CREATE TRIGGER agent_revisions_no_update_delete BEFORE UPDATE OR DELETE ON agent_revisions
    FOR EACH ROW EXECUTE FUNCTION agent_revisions_immutable()`
  yield* sql`
    CREATE TRIGGER agent_revisions_no_truncate BEFORE TRUNCATE ON agent_revisions
    FOR EACH STATEMENT EXECUTE FUNCTION agent_revisions_immutable()`
})
