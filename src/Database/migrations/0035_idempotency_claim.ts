import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The idempotency gate sent ahead (issue 37): a mutation's claim of its scope, sent with the
 * transaction's next statement instead of a round trip of its own (src/Edge/Idempotency.ts). It
 * takes the scope's transaction-scoped advisory lock, then reads the scope's record (a statement of
 * its own, so its snapshot is taken after the lock, as `idempotency_gate`'s), and deletes a record
 * past its replay window. Anything else (the lock held by another transaction, a record within its
 * window) fails with SQLSTATE `AP409`: Postgres then skips the rest of the message sequence, the
 * transaction is rolled back, and the request is served again through `idempotency_gate`, which
 * says what to answer (a replay, 409). A procedure: `CALL` answers no rows.
 */
export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`
    CREATE PROCEDURE idempotency_claim(lock_key text, t text, e text, a text, m text, p text, k text, now_at timestamptz)
    LANGUAGE plpgsql AS $$
    DECLARE
      until timestamptz;
    BEGIN
      PERFORM set_config('client_connection_check_interval', '1000', true);
      IF NOT pg_try_advisory_xact_lock(hashtextextended(lock_key, 0)) THEN
        RAISE EXCEPTION 'idempotency scope in use' USING ERRCODE = 'AP409';
      END IF;
      SELECT r.expires_at INTO until FROM idempotency_keys r
        WHERE r.tenant_id = t AND r.environment = e AND r.actor = a AND r.method = m AND r.path = p AND r.key = k;
      IF NOT FOUND THEN
        RETURN;
      END IF;
      IF until > now_at THEN
        RAISE EXCEPTION 'idempotency scope has a record' USING ERRCODE = 'AP409';
      END IF;
      DELETE FROM idempotency_keys r
        WHERE r.tenant_id = t AND r.environment = e AND r.actor = a AND r.method = m AND r.path = p AND r.key = k;
    END $$
  `
)
