import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The audit log and the settings beside it (D16).
 *
 * - `audit_entries`: one row per mutation, authentication failure and operator action of an
 *   environment, written by the request pipeline (a mutation's in its own transaction). No bodies,
 *   no secrets. Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE, except the DELETEs of
 *   the retention sweep (`agent_platform.audit_sweep = on`) and of a tenant/environment purge
 *   (`agent_platform.purging = on`), each set for its own transaction only. Listed newest first by
 *   id (the primary key's order); swept by age (`audit_entries_age`).
 * - `environment_settings` gains the default model profile (a revision created without
 *   `model_profile_id` uses it) and the audit retention in days (1..3650, 90 when unset).
 * - `api_keys_prefix`: a failed authentication with an unknown secret whose display prefix is a
 *   key's is written to that key's environment.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE audit_entries (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      id text NOT NULL,
      occurred_at timestamptz NOT NULL,
      actor_type text NOT NULL CHECK (actor_type IN ('api_key', 'user', 'operator')),
      actor_id text NOT NULL,
      key_id text,
      action text NOT NULL,
      resource_type text NOT NULL,
      resource_id text NOT NULL,
      request_id text NOT NULL,
      status integer NOT NULL,
      ip text,
      PRIMARY KEY (tenant_id, environment, id),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX audit_entries_age ON audit_entries (tenant_id, environment, occurred_at)`
  yield* sql`
    CREATE FUNCTION audit_entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF TG_OP = 'DELETE' AND (current_setting('agent_platform.audit_sweep', true) = 'on'
                               OR current_setting('agent_platform.purging', true) = 'on') THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION 'audit entries are append-only (% refused)', TG_OP USING ERRCODE = 'integrity_constraint_violation';
    END
    $fn$`
  yield* sql`
    CREATE TRIGGER audit_entries_append_only BEFORE UPDATE OR DELETE ON audit_entries
    FOR EACH ROW EXECUTE FUNCTION audit_entries_append_only()`
  yield* sql`
    CREATE TRIGGER audit_entries_no_truncate BEFORE TRUNCATE ON audit_entries
    FOR EACH STATEMENT EXECUTE FUNCTION audit_entries_append_only()`
  yield* sql`
    ALTER TABLE environment_settings
      ADD COLUMN default_model_profile_id text,
      ADD COLUMN audit_retention_days integer NOT NULL DEFAULT 90 CHECK (audit_retention_days BETWEEN 1 AND 3650)`
  yield* sql`CREATE INDEX api_keys_prefix ON api_keys (prefix)`
})
