import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Webhooks bounded per tenant (D20, issue 35): the event stored once, attempts capped, claims fair
 * across environments.
 *
 * - `webhook_events`: an announced event's payload, once (`data` as `json`, its text kept as
 *   given), referenced by its deliveries (`webhook_deliveries.event_id`, deleted with it). A
 *   delivery no longer copies the body: the worker builds it when it sends
 *   (`json_build_object('id', <delivery id>, 'type', ..., 'data', <event data>)::text`, the same
 *   expression and so the same bytes as the body `webhook_enqueue` stored before). Existing
 *   deliveries give their event its row (the `data` of their stored body, whose text the `json`
 *   `->` operator returns as it was) and drop `body`.
 * - `webhook_enqueue(...)` writes the event once, only when an enabled endpoint of the cell
 *   subscribes to its type, then one small row per endpoint (ids, status, times): a run commit's
 *   per-endpoint work is that row, not a copy of up to 100,000 characters of the event.
 * - `webhook_deliveries.attempt_count`: every attempt made; `attempts` keeps the last 50
 *   (`webhook_last_attempts`), existing ones trimmed.
 * - Indexes of the fair claim (src/Webhooks/Repo.ts `claim`), which reads per endpoint, never the
 *   whole backlog:
 *   - `webhook_deliveries_pending (endpoint_id, next_attempt_at, id) WHERE pending`: the endpoints
 *     with pending deliveries, found by a loose index scan (one descent per endpoint, however long
 *     its backlog), and each one's oldest due deliveries (a range scan that stops after the few it
 *     may take);
 *   - `webhook_deliveries_leased (lease_until) WHERE lease_until IS NOT NULL`: the live leases
 *     (at most the processes' WEBHOOK_CONCURRENCY), counted per endpoint and per environment; also
 *     the next lease to run out for the worker's wake-up;
 *   - `webhook_deliveries_event (event_id)`: an event's deliveries (the reference, the cleanup
 *     of an endpoint's deletion); `webhook_events_cell (tenant_id, environment)`: the purge.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_events (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      type text NOT NULL,
      data json NOT NULL,
      created_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX webhook_events_cell ON webhook_events (tenant_id, environment)`
  yield* sql`
    INSERT INTO webhook_events (id, tenant_id, environment, type, data, created_at)
    SELECT DISTINCT ON (event_id) event_id, tenant_id, environment, event_type, (body::json) -> 'data', created_at
    FROM webhook_deliveries ORDER BY event_id, id`
  yield* sql`
    CREATE FUNCTION webhook_last_attempts(attempts jsonb, n integer) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $fn$
      SELECT CASE WHEN jsonb_array_length(attempts) <= n THEN attempts ELSE (
        SELECT jsonb_agg(a.value ORDER BY a.i) FROM jsonb_array_elements(attempts) WITH ORDINALITY AS a(value, i)
        WHERE a.i > jsonb_array_length(attempts) - n) END
    $fn$`
  yield* sql`
    ALTER TABLE webhook_deliveries
      DROP COLUMN body,
      ADD COLUMN attempt_count integer NOT NULL DEFAULT 0,
      ADD CONSTRAINT webhook_deliveries_event_fk FOREIGN KEY (event_id) REFERENCES webhook_events(id) ON DELETE CASCADE`
  yield* sql`
    UPDATE webhook_deliveries SET attempt_count = jsonb_array_length(attempts), attempts = webhook_last_attempts(attempts, 50)
    WHERE jsonb_array_length(attempts) > 0`
  yield* sql`CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id)`
  yield* sql`
    CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, next_attempt_at, id) WHERE status = 'pending'`
  yield* sql`CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_until) WHERE lease_until IS NOT NULL`
  yield* sql`
    CREATE OR REPLACE FUNCTION webhook_enqueue(p_tenant text, p_environment text, p_type text, p_event_id text, p_at timestamptz, p_data json)
    RETURNS integer LANGUAGE plpgsql AS $fn$
    DECLARE
      n integer;
    BEGIN
      INSERT INTO webhook_events (id, tenant_id, environment, type, data, created_at)
      SELECT p_event_id, p_tenant, p_environment, p_type, p_data, p_at
      WHERE EXISTS (
        SELECT 1 FROM webhook_endpoints
        WHERE tenant_id = p_tenant AND environment = p_environment AND enabled AND p_type = ANY (event_types))
      ON CONFLICT (id) DO NOTHING;
      IF NOT FOUND THEN
        RETURN 0;
      END IF;
      INSERT INTO webhook_deliveries (id, tenant_id, environment, endpoint_id, event_id, event_type, status, next_attempt_at, created_at)
      SELECT webhook_message_id(p_at), p_tenant, p_environment, e.id, p_event_id, p_type, 'pending', p_at, p_at
      FROM webhook_endpoints e
      WHERE e.tenant_id = p_tenant AND e.environment = p_environment AND e.enabled AND p_type = ANY (e.event_types)
      ORDER BY e.id;
      GET DIAGNOSTICS n = ROW_COUNT;
      IF n = 0 THEN
        -- its endpoints went between the two statements: nothing refers to the event
        DELETE FROM webhook_events WHERE id = p_event_id;
      ELSE
        PERFORM pg_notify('webhook_deliveries', 'due');
      END IF;
      RETURN n;
    END
    $fn$`
})
