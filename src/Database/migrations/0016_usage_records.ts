import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Usage records (D16) are immutable. The table (0004) gets:
 * - checks of what a record is: a `rec_` id, a `model_call` naming its profile, provider and model,
 *   a `tool_call` naming its tool, no negative token counts;
 * - the trigger of every immutable table (`immutable_unless_purging`, 0007): UPDATE and DELETE are
 *   refused except the DELETEs of a tenant/environment purge (`agent_platform.purging = on`, set
 *   by the purge for its own transaction only), and TRUNCATE always;
 * - indexes for the list (a cell's records newest first by id) and a run's records.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE usage_records
      ADD CONSTRAINT usage_records_id_prefix CHECK (left(id, 4) = 'rec_'),
      ADD CONSTRAINT usage_records_tokens CHECK (input_tokens >= 0 AND output_tokens >= 0),
      ADD CONSTRAINT usage_records_kind_fields CHECK (
        (kind = 'model_call' AND model_profile_id IS NOT NULL AND provider IS NOT NULL AND model IS NOT NULL
          AND tool_id IS NULL)
        OR (kind = 'tool_call' AND tool_id IS NOT NULL))`
  yield* sql`
    CREATE TRIGGER usage_records_immutable BEFORE UPDATE OR DELETE ON usage_records
    FOR EACH ROW EXECUTE FUNCTION immutable_unless_purging()`
  yield* sql`
    CREATE TRIGGER usage_records_no_truncate BEFORE TRUNCATE ON usage_records
    FOR EACH STATEMENT EXECUTE FUNCTION immutable_unless_purging()`
  yield* sql`CREATE INDEX usage_records_list ON usage_records (tenant_id, environment, id)`
  yield* sql`CREATE INDEX usage_records_run ON usage_records (run_id, id)`
})
