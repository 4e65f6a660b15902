import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Schedules (D15): a cron expression in an IANA time zone that starts a run of a pinned agent
 * revision, in a new conversation, as the key that created it.
 *
 * - `schedules`: the definition, its state (`active`, `paused`, or `disabled` with a reason) and
 *   `next_run_at`, the next scheduled time (null unless active). The scheduler of each process
 *   claims due ones (`next_run_at <=` its Clock's now, partial index `schedules_due`) with
 *   `FOR UPDATE SKIP LOCKED`.
 * - `schedule_firings`: one row per scheduled time that started a run. Its primary key
 *   (schedule_id, scheduled_at) is the run's idempotency identity: the row is written in the same
 *   transaction as the conversation, the run's admission and the schedule's new `next_run_at`, so
 *   a scheduled time starts one run, across restarts and processes, or none. `run_id` is checked
 *   at commit (DEFERRABLE): the firing is claimed first, then the run it names is admitted.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE schedules (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      workspace_id text NOT NULL REFERENCES workspaces(id),
      agent_revision_id text NOT NULL REFERENCES agent_revisions(id),
      cron text NOT NULL,
      timezone text NOT NULL,
      input jsonb NOT NULL,
      enabled boolean NOT NULL,
      status text NOT NULL CHECK (status IN ('active', 'paused', 'disabled')),
      status_reason text,
      next_run_at timestamptz,
      last_run_at timestamptz,
      last_run_id text REFERENCES runs(id),
      created_by_key_id text NOT NULL REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX schedules_cell ON schedules (tenant_id, environment, id)`
  yield* sql`CREATE INDEX schedules_due ON schedules (next_run_at) WHERE status = 'active'`
  yield* sql`
    CREATE TABLE schedule_firings (
      schedule_id text NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
      scheduled_at timestamptz NOT NULL,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      run_id text NOT NULL UNIQUE REFERENCES runs(id) DEFERRABLE INITIALLY DEFERRED,
      created_at timestamptz NOT NULL,
      PRIMARY KEY (schedule_id, scheduled_at)
    )`
  yield* sql`CREATE INDEX schedule_firings_runs ON schedule_firings (schedule_id, run_id)`
})
