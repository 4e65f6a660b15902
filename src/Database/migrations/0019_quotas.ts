import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Quotas (D16).
 *
 * - `quota_limits`: the limits operators set, per environment and quota name; a quota without a
 *   row has the operator config's default for its environment kind.
 * - `quota_usage`: one row of counters per environment, changed in the transactions that change
 *   what they count, so they cannot drift from it:
 *   - `runs_today` (of `day`) and `active_runs` by the run admission's own statement, which counts
 *     the run only while every limit leaves room (`INSERT ... ON CONFLICT DO UPDATE ... WHERE`:
 *     the row's lock orders concurrent admissions and the WHERE is evaluated on its latest
 *     version, so 64 concurrent admissions against a limit of 10 count exactly 10);
 *   - `active_runs` down and `tokens_today` up by the run commit that ends the run or records a
 *     model call's tokens;
 *   - `storage_bytes` by the file insert (an upload only while it fits) and the file delete.
 *   A counter of another day reads as 0 and is reset by the next write (`day` never goes back).
 * Both go with the environment's purge. Existing environments get their counters from what exists.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE quota_limits (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL CHECK (name IN ('runs_per_day', 'concurrent_runs', 'tokens_per_day', 'storage_bytes')),
      "limit" bigint NOT NULL CHECK ("limit" >= 0),
      updated_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment, name)
    )`
  yield* sql`
    CREATE TABLE quota_usage (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      day date NOT NULL DEFAULT '1970-01-01',
      runs_today bigint NOT NULL DEFAULT 0,
      tokens_today bigint NOT NULL DEFAULT 0,
      active_runs bigint NOT NULL DEFAULT 0,
      storage_bytes bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (tenant_id, environment)
    )`
  yield* sql`
    INSERT INTO quota_usage (tenant_id, environment, day, runs_today, tokens_today, active_runs, storage_bytes)
    SELECT e.tenant_id, e.name, (now() AT TIME ZONE 'UTC')::date,
      (SELECT count(*) FROM runs r WHERE r.tenant_id = e.tenant_id AND r.environment = e.name
         AND r.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'),
      (SELECT COALESCE(sum(u.input_tokens + u.output_tokens), 0) FROM usage_records u
         WHERE u.tenant_id = e.tenant_id AND u.environment = e.name
         AND u.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'),
      (SELECT count(*) FROM runs r WHERE r.tenant_id = e.tenant_id AND r.environment = e.name
         AND r.status IN ('queued', 'running', 'requires_action', 'cancel_requested')),
      (SELECT COALESCE(sum(f.bytes), 0) FROM files f WHERE f.tenant_id = e.tenant_id AND f.environment = e.name)
    FROM environments e WHERE e.state <> 'deleted'`
})
