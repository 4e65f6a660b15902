/**
 * Usage (D16): the usage records of an environment (immutable, one per model call and per tool
 * call, written in the transaction of the run step that caused them: src/Runs/Repo.ts `commitAll`)
 * and the usage report computed from them. Windows are [from, to), by default the 24 h before now.
 * The quickstart key sees its own workspace's runs only.
 */
import { Clock, Effect, Option } from "effect"

import { dieOnSqlError } from "./Database/Defects.js"
import type { Usage, UsageGroupBy, UsageRecord, UsageRecordParams, UsageTotals } from "./Domain/Usage.js"
import * as Cursor from "./Kernel/Cursor.js"
import { invalid } from "./Kernel/Errors.js"
import { toIso } from "./Kernel/Ids.js"
import { cellKey, type Principal } from "./Kernel/Principal.js"
import { ordered, timeParam } from "./Kernel/TimeRange.js"
import { Platform } from "./Platform.js"
import { type UsageRecordRow, UsageRepo } from "./Usage/Repo.js"

export interface UsageQuery {
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly group_by?: UsageGroupBy | undefined
}

const DAY_MS = 24 * 3600 * 1000

const toRecord = (r: UsageRecordRow): UsageRecord => ({
  id: r.id,
  object: "usage_record",
  run_id: r.run_id,
  kind: r.kind,
  agent_revision_id: r.agent_revision_id,
  model_profile_id: r.model_profile_id,
  provider: r.provider,
  model: r.model,
  tool_id: r.tool_id,
  input_tokens: r.input_tokens,
  output_tokens: r.output_tokens,
  created_at: toIso(r.created_at)
})

/**
 * A records cursor (D6) is bound to the filters as given (`from`, `to`, `run_id`) and carries the
 * window its first page resolved: a default window ("the last 24 h") stays the same while paging.
 */
const recordsKey = (lastId: string, from: Date, to: Date) => JSON.stringify([lastId, from.getTime(), to.getTime()])
const parseRecordsKey = (key: string): { lastId: string; from: Date; to: Date } | undefined => {
  try {
    const v: unknown = JSON.parse(key)
    if (Array.isArray(v) && v.length === 3 && typeof v[0] === "string") {
      const [lastId, from, to] = [v[0], new Date(v[1]), new Date(v[2])]
      if (Number.isInteger(v[1]) && Number.isInteger(v[2]) && !Number.isNaN(from.getTime() + to.getTime())) return { lastId, from, to }
    }
  } catch {
    // fallthrough
  }
  return undefined
}
const invalidCursor = invalid("invalid_cursor", "The cursor is malformed or belongs to another list", "cursor")

export class UsageReports extends Effect.Service<UsageReports>()("UsageReports", {
  effect: Effect.gen(function*() {
    const repo = yield* UsageRepo
    const platform = yield* Platform
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /** [from, to) of the parameters: `to` defaults to now, `from` to 24 h before `to`; `from` after `to` is 400. */
    const windowOf = (params: { readonly from?: string | undefined; readonly to?: string | undefined }) =>
      Effect.gen(function*() {
        const to = (yield* timeParam(params.to, "to")) ?? (yield* now)
        const from = (yield* timeParam(params.from, "from")) ?? new Date(to.getTime() - DAY_MS)
        yield* ordered(from, to)
        return { from, to }
      })

    const getUsage = (p: Principal, params: UsageQuery) =>
      Effect.gen(function*() {
        const { from, to } = yield* windowOf(params)
        const groupBy = params.group_by ?? "agent_revision"
        const workspace = yield* platform.allowedWorkspace(p)
        const rows = yield* repo.buckets(p.tenantId, p.environment, from, to, groupBy, Option.getOrUndefined(workspace))
        const zero: UsageTotals = { runs: 0, model_calls: 0, input_tokens: 0, output_tokens: 0, tool_calls: 0, run_seconds: 0 }
        const totals = rows.reduce<UsageTotals>((t, b) => ({
          runs: t.runs + b.totals.runs,
          model_calls: t.model_calls + b.totals.model_calls,
          input_tokens: t.input_tokens + b.totals.input_tokens,
          output_tokens: t.output_tokens + b.totals.output_tokens,
          tool_calls: t.tool_calls + b.totals.tool_calls,
          run_seconds: Math.round((t.run_seconds + b.totals.run_seconds) * 1000) / 1000
        }), zero)
        return {
          object: "usage",
          from: toIso(from),
          to: toIso(to),
          group_by: groupBy,
          totals,
          buckets: rows
        } satisfies Usage
      })

    /** The window's records, newest first (D6 cursors, bound to the filters, keeping the first page's window). */
    const listRecords = (p: Principal, params: Cursor.ListParams & UsageRecordParams) =>
      Effect.gen(function*() {
        const cell = cellKey(p)
        const list = `records:${JSON.stringify([params.from ?? "", params.to ?? "", params.run_id ?? ""])}`
        const key = yield* Cursor.decode(params.cursor, list, cell)
        const resumed = key === undefined ? undefined : parseRecordsKey(key)
        if (key !== undefined && resumed === undefined) return yield* Effect.fail(invalidCursor)
        const { from, to } = resumed ?? (yield* windowOf(params))
        const limit = params.limit ?? Cursor.DEFAULT_LIMIT
        const workspace = yield* platform.allowedWorkspace(p)
        const rows = yield* repo.records(p.tenantId, p.environment, resumed?.lastId, limit, {
          from,
          to,
          runId: params.run_id,
          workspaceId: Option.getOrUndefined(workspace)
        })
        const items = rows.slice(0, limit)
        return {
          items: items.map(toRecord),
          next_cursor: rows.length > limit ? Cursor.encode(list, cell, recordsKey(items[items.length - 1]!.id, from, to)) : null
        }
      })

    return {
      getUsage: (p: Principal, params: UsageQuery) => dieOnSqlError(getUsage(p, params)),
      listRecords: (p: Principal, params: Cursor.ListParams & UsageRecordParams) => dieOnSqlError(listRecords(p, params))
    } as const
  }),
  dependencies: [UsageRepo.Default, Platform.Default]
}) {}
