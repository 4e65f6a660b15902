/**
 * SQL of usage (D16): the usage records of a window (a keyset page, newest first) and the usage
 * buckets computed from them. The records are written by the run store with the step that caused
 * them (src/Runs/Repo.ts `commitAll`); the table refuses UPDATE, DELETE and TRUNCATE except the
 * purge's DELETEs (migration 0016). Nothing here reads the runs' counters (`runs.input_tokens`...).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema, type Types } from "effect"

import * as Rows from "../Database/Rows.js"
import { type UsageGroupBy, UsageRecordKind, type UsageTotals } from "../Domain/Usage.js"

export const UsageRecordRow = Schema.Struct({
  id: Schema.String,
  run_id: Schema.String,
  kind: UsageRecordKind,
  agent_revision_id: Schema.String,
  model_profile_id: Schema.NullOr(Schema.String),
  provider: Schema.NullOr(Schema.String),
  model: Schema.NullOr(Schema.String),
  tool_id: Schema.NullOr(Schema.String),
  input_tokens: Rows.Int8,
  output_tokens: Rows.Int8,
  created_at: Rows.Time
})
export type UsageRecordRow = typeof UsageRecordRow.Type

/** Which records: a cell's, created in [from, to), of one run, of runs in one workspace (the quickstart key's). */
export interface RecordFilter {
  readonly from: Date
  readonly to: Date
  readonly runId?: string | undefined
  readonly workspaceId?: string | undefined
}

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

    /** A page of the records, newest first (by id, time-ordered): `limit + 1` rows, the caller pages. */
    const records = (tenantId: string, environment: string, after: string | undefined, limit: number, filter: RecordFilter) =>
      sql`
        SELECT u.id, u.run_id, u.kind, u.agent_revision_id, u.model_profile_id, u.provider, u.model, u.tool_id,
               u.input_tokens, u.output_tokens, u.created_at
        FROM usage_records u
        WHERE u.tenant_id = ${tenantId} AND u.environment = ${environment}
          AND u.created_at >= ${filter.from} AND u.created_at < ${filter.to}
          ${after === undefined ? sql`` : sql`AND u.id < ${after}`}
          ${filter.runId === undefined ? sql`` : sql`AND u.run_id = ${filter.runId}`}
          ${
        filter.workspaceId === undefined
          ? sql``
          : sql`AND EXISTS (SELECT 1 FROM runs r WHERE r.id = u.run_id AND r.workspace_id = ${filter.workspaceId})`
      }
        ORDER BY u.id DESC LIMIT ${limit + 1}`.pipe(Rows.all(UsageRecordRow))

    /**
     * Usage buckets (D16), grouped by UTC day, agent revision or model profile (a tool call's
     * record, which names no profile, counts under its revision's). Model calls, tool calls and
     * tokens: exactly the sums of the records created in [from, to), as `records` lists them. Runs
     * and run seconds: the runs admitted in [from, to) and their `started_at`/`completed_at`, each
     * written once by the run's state machine (no record stands for a run, and a run that never
     * reached its model still counts). Never the runs' counters.
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
        const recordSums = yield* sql`
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
                 COALESCE(sum(GREATEST(0, EXTRACT(EPOCH FROM (COALESCE(r.completed_at, ${to}) - r.started_at))))
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
        for (const r of recordSums) {
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

    return { records, buckets } as const
  })
}) {}
