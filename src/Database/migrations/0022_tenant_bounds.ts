import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * One tenant cannot harm another (D20): the counts every environment keeps get quotas of their own.
 *
 * - `quota_limits.name` admits `webhook_endpoints` (at most 16 by default) and `schedules` (100).
 * - `quota_usage.webhook_endpoints` and `quota_usage.schedules`: how many the environment has,
 *   changed by the statements that create and delete them (src/Quotas/Queries.ts `countLevel`,
 *   `releaseLevel`), so they cannot drift; existing environments get them from what exists.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE quota_limits DROP CONSTRAINT quota_limits_name_check`
  yield* sql`
    ALTER TABLE quota_limits ADD CONSTRAINT quota_limits_name_check
    CHECK (name IN ('runs_per_day', 'concurrent_runs', 'tokens_per_day', 'storage_bytes', 'webhook_endpoints', 'schedules'))`
  yield* sql`
    ALTER TABLE quota_usage
      ADD COLUMN webhook_endpoints bigint NOT NULL DEFAULT 0,
      ADD COLUMN schedules bigint NOT NULL DEFAULT 0`
  yield* sql`
    INSERT INTO quota_usage AS u (tenant_id, environment, webhook_endpoints, schedules)
    SELECT e.tenant_id, e.name,
      (SELECT count(*) FROM webhook_endpoints w WHERE w.tenant_id = e.tenant_id AND w.environment = e.name),
      (SELECT count(*) FROM schedules s WHERE s.tenant_id = e.tenant_id AND s.environment = e.name)
    FROM environments e WHERE e.state <> 'deleted'
    ON CONFLICT (tenant_id, environment) DO UPDATE
      SET webhook_endpoints = EXCLUDED.webhook_endpoints, schedules = EXCLUDED.schedules`
})
