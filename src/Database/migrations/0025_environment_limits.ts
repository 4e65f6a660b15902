import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * One tenant cannot harm another (D20): schedules bounded per environment and fired fairly.
 *
 * - `environment_settings.schedule_min_interval_seconds` (1..3600, 60 when unset): a schedule's
 *   cron may not fire more often (the operator sets it). `audit_retention_days` keeps its 1..3650
 *   check: values below 7 set before D20 stay as they are (only the operator's 7..3650 and a key's
 *   raise can change them now).
 * - `schedules_cell_due`: the due schedules of one environment, earliest first (the scheduler
 *   claims them cell by cell, in turn: src/Runtime/Scheduler.ts).
 * - Creating or enabling a schedule now needs `runs:write`: an existing schedule whose creating key
 *   lacks it (keys' scopes never change) is disabled, `authorization_revoked`, as a revoked key's.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE environment_settings
      ADD COLUMN schedule_min_interval_seconds integer NOT NULL DEFAULT 60
        CHECK (schedule_min_interval_seconds BETWEEN 1 AND 3600)`
  yield* sql`CREATE INDEX schedules_cell_due ON schedules (tenant_id, environment, next_run_at) WHERE status = 'active'`
  yield* sql`
    UPDATE schedules s SET status = 'disabled', status_reason = 'authorization_revoked', next_run_at = NULL, updated_at = now()
    FROM api_keys k
    WHERE k.id = s.created_by_key_id AND s.status <> 'disabled' AND NOT ('runs:write' = ANY (k.scopes))`
})
