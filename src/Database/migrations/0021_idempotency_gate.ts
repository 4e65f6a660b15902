import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The idempotency gate in one round trip (issue 20): takes the scope's transaction-scoped advisory
 * lock (false: another transaction holds it), then reads the scope's record, as two statements of
 * a volatile function: the read's snapshot is taken after the lock, so it sees the record of a
 * request that committed and released the lock just before (one statement's snapshot would be
 * taken before its lock, and miss it). The transaction also checks its client every second while
 * a statement runs (see src/Edge/IdempotencyRepo.ts).
 */
export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`
    CREATE FUNCTION idempotency_gate(lock_key text, t text, e text, a text, m text, p text, k text)
    RETURNS TABLE (locked boolean, fingerprint text, status integer, headers jsonb, body text, expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      got boolean;
    BEGIN
      PERFORM set_config('client_connection_check_interval', '1000', true);
      got := pg_try_advisory_xact_lock(hashtextextended(lock_key, 0));
      RETURN QUERY
        SELECT got, r.fingerprint, r.status, r.headers, r.body, r.expires_at
        FROM (SELECT 1) AS one
        LEFT JOIN idempotency_keys r
          ON r.tenant_id = t AND r.environment = e AND r.actor = a AND r.method = m AND r.path = p AND r.key = k;
    END $$
  `
)
