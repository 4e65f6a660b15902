import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Webhook endpoints and their deliveries (D11, D18): an outbox in Postgres.
 *
 * - `webhook_endpoints`: a customer's URL, the event types it subscribes to, and its signing secret
 *   (AES-256-GCM, as model profile credentials); after a rotation the previous secret too, until
 *   `previous_secret_expires_at`.
 * - `webhook_deliveries`: one per event and subscribed endpoint, written in the transaction that
 *   commits the event (so no committed event is missed and no uncommitted one is sent), with the
 *   exact body that is signed and sent. Its `id` is the message id (`msg_...`): the body's `id` and
 *   the `webhook-id` header. A worker claims a due delivery by setting a lease (`lease_until`) in
 *   a short transaction, sends it, then records the attempt; a lease that ran out (the process died
 *   mid-attempt) is claimed again.
 * - `webhook_enqueue(...)`: inserts the deliveries of one event (none when no enabled endpoint of
 *   the cell subscribes to its type) and notifies channel `webhook_deliveries` (delivered at
 *   commit) so workers wake at once.
 * - A trigger on `run_events` enqueues the run events of WEBHOOK_RUN_EVENT_TYPES
 *   (src/Domain/Webhooks.ts): other events cost its `WHEN`, those a cost of one indexed lookup
 *   when no endpoint subscribes. `data` is the run event as D8 shows it (src/Runs/RunStore.ts `toEvent`).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_endpoints (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      url text NOT NULL,
      description text,
      event_types text[] NOT NULL,
      enabled boolean NOT NULL DEFAULT true,
      secret_ciphertext bytea NOT NULL,
      secret_iv bytea NOT NULL,
      secret_tag bytea NOT NULL,
      previous_secret_ciphertext bytea,
      previous_secret_iv bytea,
      previous_secret_tag bytea,
      previous_secret_expires_at timestamptz,
      created_by_key_id text NOT NULL REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX webhook_endpoints_cell ON webhook_endpoints (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE webhook_deliveries (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      endpoint_id text NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
      event_id text NOT NULL,
      event_type text NOT NULL,
      body text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
      attempts jsonb NOT NULL DEFAULT '[]',
      failures integer NOT NULL DEFAULT 0,
      replay boolean NOT NULL DEFAULT false,
      next_attempt_at timestamptz,
      lease_token text,
      leased_at timestamptz,
      lease_until timestamptz,
      created_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX webhook_deliveries_cell ON webhook_deliveries (tenant_id, environment, id)`
  yield* sql`CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id)`
  yield* sql`CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending'`
  // Times as the API writes them (Date.prototype.toISOString), ids as src/Kernel/Ids.ts makes them.
  yield* sql`
    CREATE FUNCTION webhook_time(at timestamptz) RETURNS text LANGUAGE sql STABLE AS $fn$
      SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    $fn$`
  yield* sql`
    CREATE FUNCTION webhook_message_id(at timestamptz) RETURNS text LANGUAGE plpgsql VOLATILE AS $fn$
    DECLARE
      alphabet constant text := '0123456789abcdefghjkmnpqrstvwxyz';
      t bigint := floor(extract(epoch FROM at) * 1000)::bigint;
      id text := '';
    BEGIN
      FOR i IN 1..10 LOOP
        id := substr(alphabet, (t % 32)::int + 1, 1) || id;
        t := t / 32;
      END LOOP;
      FOR i IN 1..16 LOOP
        id := id || substr(alphabet, floor(random() * 32)::int + 1, 1);
      END LOOP;
      RETURN 'msg_' || id;
    END
    $fn$`
  yield* sql`
    CREATE FUNCTION webhook_enqueue(p_tenant text, p_environment text, p_type text, p_event_id text, p_at timestamptz, p_data json)
    RETURNS integer LANGUAGE plpgsql AS $fn$
    DECLARE
      endpoint record;
      message text;
      n integer := 0;
    BEGIN
      FOR endpoint IN
        SELECT id FROM webhook_endpoints
        WHERE tenant_id = p_tenant AND environment = p_environment AND enabled AND p_type = ANY (event_types)
        ORDER BY id
      LOOP
        message := webhook_message_id(p_at);
        INSERT INTO webhook_deliveries (id, tenant_id, environment, endpoint_id, event_id, event_type, body, status,
                                        next_attempt_at, created_at)
        VALUES (message, p_tenant, p_environment, endpoint.id, p_event_id, p_type,
                json_build_object('id', message, 'type', p_type, 'created_at', webhook_time(p_at),
                                  'tenant_id', p_tenant, 'environment', p_environment, 'data', p_data)::text,
                'pending', p_at, p_at);
        n := n + 1;
      END LOOP;
      IF n > 0 THEN
        PERFORM pg_notify('webhook_deliveries', 'due');
      END IF;
      RETURN n;
    END
    $fn$`
  yield* sql`
    CREATE FUNCTION run_events_webhooks() RETURNS trigger LANGUAGE plpgsql AS $fn$
    DECLARE
      cell record;
    BEGIN
      SELECT r.tenant_id, r.environment INTO cell FROM runs r
      WHERE r.id = NEW.run_id AND EXISTS (
        SELECT 1 FROM webhook_endpoints e
        WHERE e.tenant_id = r.tenant_id AND e.environment = r.environment AND e.enabled AND NEW.type = ANY (e.event_types));
      IF FOUND THEN
        PERFORM webhook_enqueue(cell.tenant_id, cell.environment, NEW.type, NEW.id, NEW.created_at,
          json_build_object('id', NEW.id, 'object', 'run.event', 'run_id', NEW.run_id, 'sequence', NEW.sequence,
                            'type', NEW.type, 'created_at', webhook_time(NEW.created_at), 'data', NEW.data));
      END IF;
      RETURN NEW;
    END
    $fn$`
  yield* sql`
    CREATE TRIGGER run_events_webhooks AFTER INSERT ON run_events FOR EACH ROW
    WHEN (NEW.type IN ('run.requires_action', 'run.succeeded', 'run.failed', 'run.cancelled', 'run.expired',
                       'run.interrupted', 'run.outcome_unknown', 'run.reconciled'))
    EXECUTE FUNCTION run_events_webhooks()`
})
