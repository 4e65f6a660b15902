/**
 * Usage (D16): runs, model calls, tokens, tool calls and run seconds in [from, to), computed from
 * usage records and runs (never from a counter that can drift), in buckets by day, agent revision
 * or model profile. The quickstart key sees its own workspace only.
 */
import { Clock, Effect, Option } from "effect"

import { dieOnSqlError } from "./Database/Defects.js"
import type { Usage, UsageGroupBy, UsageTotals } from "./Domain/Usage.js"
import { toIso } from "./Kernel/Ids.js"
import type { Principal } from "./Kernel/Principal.js"
import { ordered, timeParam } from "./Kernel/TimeRange.js"
import { Platform } from "./Platform.js"
import { UsageRepo } from "./Usage/Repo.js"

export interface UsageQuery {
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly group_by?: UsageGroupBy | undefined
}

export class UsageReports extends Effect.Service<UsageReports>()("UsageReports", {
  effect: Effect.gen(function*() {
    const repo = yield* UsageRepo
    const platform = yield* Platform
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const getUsage = (p: Principal, params: UsageQuery) =>
      Effect.gen(function*() {
        const to = (yield* timeParam(params.to, "to")) ?? (yield* now)
        const from = (yield* timeParam(params.from, "from")) ?? new Date(to.getTime() - 24 * 3600 * 1000)
        yield* ordered(from, to)
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
          run_seconds: t.run_seconds + b.totals.run_seconds
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

    return { getUsage: (p: Principal, params: UsageQuery) => dieOnSqlError(getUsage(p, params)) } as const
  }),
  dependencies: [UsageRepo.Default, Platform.Default]
}) {}
