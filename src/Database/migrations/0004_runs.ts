import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Conversations, runs, their durable events, the conversation items the agent sees, and usage
 * records (one per model call or tool call, written in the transaction of the step that caused it).
 *
 * - One non-terminal run per conversation: a partial unique index (D7 `conversation_busy`).
 * - Events are sequenced per run without gaps: `runs.last_sequence` is advanced under the run's row
 *   lock in the transaction that inserts the event. Historic events are immutable (trigger).
 * - Every event insert notifies channel `run_events` (delivered at commit), so streams anywhere
 *   learn of an event only once it is durable.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversations (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      workspace_id text NOT NULL REFERENCES workspaces(id),
      agent_revision_id text NOT NULL REFERENCES agent_revisions(id),
      created_by_key_id text NOT NULL REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`
    CREATE TABLE runs (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      workspace_id text NOT NULL,
      conversation_id text NOT NULL REFERENCES conversations(id),
      agent_revision_id text NOT NULL REFERENCES agent_revisions(id),
      key_id text NOT NULL REFERENCES api_keys(id),
      user_id text REFERENCES users(id),
      status text NOT NULL CHECK (status IN ('queued', 'running', 'requires_action', 'cancel_requested',
        'succeeded', 'failed', 'cancelled', 'expired', 'interrupted', 'outcome_unknown')),
      status_reason text,
      input jsonb,
      output jsonb,
      required_action jsonb,
      input_tokens bigint NOT NULL DEFAULT 0,
      output_tokens bigint NOT NULL DEFAULT 0,
      model_calls integer NOT NULL DEFAULT 0,
      tool_calls integer NOT NULL DEFAULT 0,
      last_sequence integer NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL,
      started_at timestamptz,
      completed_at timestamptz,
      start_deadline_at timestamptz NOT NULL,
      execution_deadline_at timestamptz,
      authorization_expires_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`
    CREATE UNIQUE INDEX runs_one_open_per_conversation ON runs (conversation_id)
    WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested')`
  yield* sql`
    CREATE INDEX runs_open ON runs (tenant_id, environment, id)
    WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested')`
  yield* sql`CREATE INDEX runs_created ON runs (tenant_id, environment, created_at)`
  yield* sql`
    CREATE TABLE run_events (
      run_id text NOT NULL REFERENCES runs(id),
      sequence integer NOT NULL CHECK (sequence > 0),
      id text NOT NULL UNIQUE,
      type text NOT NULL,
      data jsonb NOT NULL,
      created_at timestamptz NOT NULL,
      PRIMARY KEY (run_id, sequence)
    )`
  yield* sql`
    CREATE FUNCTION run_events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF current_setting('agent_platform.purging', true) = 'on' THEN
        RETURN COALESCE(OLD, NEW);
      END IF;
      RAISE EXCEPTION 'run events are immutable' USING ERRCODE = 'restrict_violation';
    END $$`
  yield* sql`
    CREATE TRIGGER run_events_immutable BEFORE UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_immutable()`
  yield* sql`
    CREATE FUNCTION run_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('run_events', json_build_object('run_id', NEW.run_id, 'sequence', NEW.sequence)::text);
      RETURN NEW;
    END $$`
  yield* sql`
    CREATE TRIGGER run_events_notify AFTER INSERT ON run_events
    FOR EACH ROW EXECUTE FUNCTION run_events_notify()`
  yield* sql`
    CREATE TABLE conversation_items (
      conversation_id text NOT NULL REFERENCES conversations(id),
      position integer NOT NULL,
      run_id text NOT NULL REFERENCES runs(id),
      item jsonb NOT NULL,
      created_at timestamptz NOT NULL,
      PRIMARY KEY (conversation_id, position)
    )`
  yield* sql`
    CREATE TABLE usage_records (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      run_id text NOT NULL REFERENCES runs(id),
      kind text NOT NULL CHECK (kind IN ('model_call', 'tool_call')),
      agent_revision_id text NOT NULL,
      model_profile_id text,
      provider text,
      model text,
      tool_id text,
      input_tokens bigint NOT NULL DEFAULT 0,
      output_tokens bigint NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX usage_records_time ON usage_records (tenant_id, environment, created_at)`
})
