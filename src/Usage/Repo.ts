/** Usage read models (D16): buckets computed from usage records and runs, never from counters. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema, type Types } from "effect"

import * as Rows from "../Database/Rows.js"
import type { UsageGroupBy, UsageTotals } from "../Domain/Usage.js"

const RecordBucketRow = Schema.Struct({
  key: Schema.String,
  model_calls: Rows.Int8,
  tool_calls: Rows.Int8,
  input_tokens: Rows.Int8,
  output_tokens: Rows.Int8
})
const RunBucketRow = Schema.Struct({ key: Schema.String, runs: Rows.Int8, run_seconds: Rows.Int8 })

export class UsageRepo extends Effect.Service<UsageRepo>()("UsageRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Usage buckets (D16) from usage records and runs (never from counters): records created in
     * [from, to) and runs admitted in [from, to), grouped by day, agent revision or model profile.
     */
    const buckets = (
      tenantId: string,
      environment: string,
      from: Date,
      to: Date,
      groupBy: UsageGroupBy,
      workspaceId: string | undefined
    ) =>
      Effect.gen(function*() {
        const recordKey = groupBy === "day"
          ? sql`to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
          : groupBy === "agent_revision"
          ? sql`u.agent_revision_id`
          : sql`COALESCE(u.model_profile_id, rv.model_profile_id)`
        const runKey = groupBy === "day"
          ? sql`to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
          : groupBy === "agent_revision"
          ? sql`r.agent_revision_id`
          : sql`rv.model_profile_id`
        const inWorkspace = workspaceId === undefined ? sql`TRUE` : sql`r.workspace_id = ${workspaceId}`
        const records = yield* sql`
          SELECT ${recordKey} AS key,
                 count(*) FILTER (WHERE u.kind = 'model_call') AS model_calls,
                 count(*) FILTER (WHERE u.kind = 'tool_call') AS tool_calls,
                 COALESCE(sum(u.input_tokens), 0) AS input_tokens,
                 COALESCE(sum(u.output_tokens), 0) AS output_tokens
          FROM usage_records u
          JOIN runs r ON r.id = u.run_id
          JOIN agent_revisions rv ON rv.id = u.agent_revision_id
          WHERE u.tenant_id = ${tenantId} AND u.environment = ${environment}
            AND u.created_at >= ${from} AND u.created_at < ${to} AND ${inWorkspace}
          GROUP BY 1`.pipe(Rows.all(RecordBucketRow))
        const runs = yield* sql`
          SELECT ${runKey} AS key, count(*) AS runs,
                 COALESCE(sum(EXTRACT(EPOCH FROM (COALESCE(r.completed_at, ${to}) - r.started_at)))
                   FILTER (WHERE r.started_at IS NOT NULL), 0) AS run_seconds
          FROM runs r
          JOIN agent_revisions rv ON rv.id = r.agent_revision_id
          WHERE r.tenant_id = ${tenantId} AND r.environment = ${environment}
            AND r.created_at >= ${from} AND r.created_at < ${to} AND ${inWorkspace}
          GROUP BY 1`.pipe(Rows.all(RunBucketRow))
        const buckets = new Map<string, Types.Mutable<UsageTotals>>()
        const bucket = (key: string) => {
          let b = buckets.get(key)
          if (!b) buckets.set(key, b = { runs: 0, model_calls: 0, input_tokens: 0, output_tokens: 0, tool_calls: 0, run_seconds: 0 })
          return b
        }
        for (const r of records) {
          const b = bucket(r.key)
          b.model_calls = r.model_calls
          b.tool_calls = r.tool_calls
          b.input_tokens = r.input_tokens
          b.output_tokens = r.output_tokens
        }
        for (const r of runs) {
          const b = bucket(r.key)
          b.runs = r.runs
          b.run_seconds = Math.round(r.run_seconds * 1000) / 1000
        }
        return [...buckets.entries()]
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .map(([key, totals]) => ({ key, totals }))
      })

    return { buckets } as const
  })
}) {}
