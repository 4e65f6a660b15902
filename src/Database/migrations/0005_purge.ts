import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Immutable tables (agent revisions, run events) refuse changes, except the deletion purge of a
 * tenant or environment: it sets `agent_platform.purging = on` for its own transaction only
 * (`set_config(..., true)`), and then its DELETEs (never UPDATEs or TRUNCATE) pass.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE OR REPLACE FUNCTION agent_revisions_immutable() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF TG_OP = 'DELETE' AND current_setting('agent_platform.purging', true) = 'on' THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION 'agent revisions are immutable (% refused)', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
    END
    $fn$`
  yield* sql`
    CREATE OR REPLACE FUNCTION run_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      IF TG_OP = 'DELETE' AND current_setting('agent_platform.purging', true) = 'on' THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION 'run events are immutable (% refused)', TG_OP USING ERRCODE = 'restrict_violation';
    END
    $fn$`
  yield* sql`CREATE INDEX conversations_cell ON conversations (tenant_id, environment)`
})
