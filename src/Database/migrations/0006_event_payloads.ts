import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Run event notifications carry the event itself when it fits (NOTIFY payloads are limited to
 * 8000 bytes), so the event bus need not read each event back; larger events carry only their
 * position and are read from the table.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE OR REPLACE FUNCTION run_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      full_payload text := json_build_object(
        'run_id', NEW.run_id, 'sequence', NEW.sequence,
        'event', json_build_object('id', NEW.id, 'type', NEW.type, 'data', NEW.data,
                                   'created_at', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))::text;
    BEGIN
      IF octet_length(full_payload) < 7900 THEN
        PERFORM pg_notify('run_events', full_payload);
      ELSE
        PERFORM pg_notify('run_events', json_build_object('run_id', NEW.run_id, 'sequence', NEW.sequence)::text);
      END IF;
      RETURN NEW;
    END $$`
})
