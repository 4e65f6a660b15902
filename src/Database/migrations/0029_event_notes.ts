import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * One NOTIFY per statement that writes run events (issue 37), not one per event row: the
 * `run_events_notify` trigger becomes a statement-level trigger over the statement's inserted rows
 * (a transition table), so a run's commit, which writes its events in one statement, costs one
 * trigger call and one notification however many events it wrote.
 *
 * A notification on channel `run_events` is `{"events": [note, ...]}`, each note what one event's
 * notification was before (`{"run_id", "sequence", "event": {"id", "type", "data", "created_at"}}`),
 * in the order of (run, sequence). When the statement's notes do not fit one payload (Postgres
 * allows 8,000 bytes; 7,900 kept as before), each event gets its own notification, its note
 * without `event` when even that does not fit (the listener then reads it, as before).
 * Listeners (src/Runs/EventBus.ts) read both shapes.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DROP TRIGGER run_events_notify ON run_events`
  yield* sql`DROP FUNCTION run_events_notify()`
  yield* sql`
    CREATE FUNCTION run_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      note text;
    BEGIN
      FOR note IN
        WITH notes AS (
          SELECT run_id, sequence, json_build_object(
            'run_id', run_id, 'sequence', sequence,
            'event', json_build_object('id', id, 'type', type, 'data', data,
                                       'created_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text AS full_note
          FROM inserted
        ),
        together AS (SELECT '{"events":[' || string_agg(full_note, ',' ORDER BY run_id, sequence) || ']}' AS note FROM notes)
        SELECT t.note FROM together t WHERE octet_length(t.note) < 7900
        UNION ALL
        SELECT * FROM (
          SELECT '{"events":[' || CASE WHEN octet_length(n.full_note) < 7900 THEN n.full_note
                                       ELSE json_build_object('run_id', n.run_id, 'sequence', n.sequence)::text END || ']}'
          FROM notes n, together t WHERE octet_length(t.note) >= 7900
          ORDER BY n.run_id, n.sequence) one_by_one
      LOOP
        PERFORM pg_notify('run_events', note);
      END LOOP;
      RETURN NULL;
    END $$`
  yield* sql`
    CREATE TRIGGER run_events_notify AFTER INSERT ON run_events
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION run_events_notify()`
})
