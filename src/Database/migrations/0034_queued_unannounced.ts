import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A run's `run.queued` event is not announced (issue 37): it is written by the run's admission, and
 * nobody can follow a run before its admission committed (a stream or a waiter names a run the
 * database already has, subscribes, then reads the run's events from the database, which holds
 * it). So the admission's statement notifies nothing, and a run that answers at once costs one
 * notification (its commit's) instead of two: a NOTIFY less per run for Postgres to queue and for
 * every process of the cluster to receive and read. Any other statement's events are announced as
 * before (migration 0029); a listener that sees a gap in a run's sequence reads it from the
 * database, as before.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE OR REPLACE FUNCTION run_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      note text;
    BEGIN
      FOR note IN
        WITH notes AS (
          SELECT run_id, sequence, json_build_object(
            'run_id', run_id, 'sequence', sequence,
            'event', json_build_object('id', id, 'type', type, 'data', data,
                                       'created_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text AS full_note
          FROM inserted WHERE type <> 'run.queued'
        ),
        together AS (SELECT '{"events":[' || string_agg(full_note, ',' ORDER BY run_id, sequence) || ']}' AS note FROM notes)
        SELECT t.note FROM together t WHERE t.note IS NOT NULL AND octet_length(t.note) < 7900
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
})
