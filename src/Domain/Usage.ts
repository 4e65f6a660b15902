/** Usage (D16): computed from usage records and runs, never from a counter. */
import { Schema } from "effect"

import { DateTimeParam, Timestamp } from "../Kernel/Ids.js"

export const UsageTotals = Schema.Struct({
  runs: Schema.Number,
  model_calls: Schema.Number,
  input_tokens: Schema.Number,
  output_tokens: Schema.Number,
  tool_calls: Schema.Number,
  run_seconds: Schema.Number
}).annotations({ identifier: "UsageTotals" })
export type UsageTotals = typeof UsageTotals.Type

export const UsageGroupBy = Schema.Literal("day", "agent_revision", "model_profile")
export type UsageGroupBy = typeof UsageGroupBy.Type

export const Usage = Schema.Struct({
  object: Schema.Literal("usage"),
  from: Timestamp,
  to: Timestamp,
  group_by: UsageGroupBy,
  totals: UsageTotals,
  buckets: Schema.Array(Schema.Struct({ key: Schema.String, totals: UsageTotals }))
}).annotations({ identifier: "Usage" })
export type Usage = typeof Usage.Type

export const UsageParams = Schema.Struct({
  from: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; default: 24 h before `to`" })),
  to: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; default: now" })),
  group_by: Schema.optional(UsageGroupBy.annotations({ description: "Default agent_revision" }))
})
