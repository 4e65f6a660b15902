import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * One tenant cannot harm another (D20): the settings a key cannot lower or set.
 *
 * - `environment_settings.schedule_min_interval_seconds` (1..3600, 60 when unset): a schedule's
 *   cron may not fire more often (the operator sets it). `audit_retention_days` keeps its 1..3650
 *   check: values below 7 set before D20 stay as they are (only the operator's 7..3650 and a key's
 *   raise can change them now).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE environment_settings
      ADD COLUMN schedule_min_interval_seconds integer NOT NULL DEFAULT 60
        CHECK (schedule_min_interval_seconds BETWEEN 1 AND 3600)`
})
