/**
 * Usage (D16): usage records (immutable, one per model call and per tool call, written in the
 * transaction of the run step that caused them) and the usage report computed from them.
 */
import { Schema } from "effect"

import { DateTimeParam, Timestamp } from "../Kernel/Ids.js"
import { RefString } from "../Kernel/Strings.js"

export const UsageTotals = Schema.Struct({
  runs: Schema.Number.annotations({
    description: "Runs admitted in the window (by the run's `created_at`), whether or not they reached a model call"
  }),
  model_calls: Schema.Number.annotations({ description: "Usage records of kind `model_call` in the window" }),
  input_tokens: Schema.Number.annotations({ description: "Sum of the window's records' `input_tokens`" }),
  output_tokens: Schema.Number.annotations({ description: "Sum of the window's records' `output_tokens`" }),
  tool_calls: Schema.Number.annotations({ description: "Usage records of kind `tool_call` in the window" }),
  run_seconds: Schema.Number.annotations({
    description: "Seconds the window's runs (as counted in `runs`) ran: `started_at` to `completed_at`, or to `to` " +
      "while still running; runs that never started count 0"
  })
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
  buckets: Schema.Array(Schema.Struct({
    key: Schema.String.annotations({
      description: "The UTC day (`YYYY-MM-DD`), the agent revision id or the model profile id"
    }),
    totals: UsageTotals
  })).annotations({ description: "One per key with records or runs in the window, ordered by key" })
}).annotations({ identifier: "Usage" })
export type Usage = typeof Usage.Type

export const UsageParams = Schema.Struct({
  from: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; default: 24 h before `to`" })),
  to: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; default: now" })),
  group_by: Schema.optional(UsageGroupBy.annotations({ description: "Default agent_revision" }))
})

export const UsageRecordKind = Schema.Literal("model_call", "tool_call")
export type UsageRecordKind = typeof UsageRecordKind.Type

export const UsageRecord = Schema.Struct({
  id: Schema.String.annotations({ description: "`rec_...`" }),
  object: Schema.Literal("usage_record"),
  run_id: Schema.String.annotations({ description: "The run whose step made the call" }),
  kind: UsageRecordKind.annotations({ description: "A call of the run's model, or a call of a tool" }),
  agent_revision_id: Schema.String.annotations({ description: "The revision the run ran" }),
  model_profile_id: Schema.NullOr(Schema.String).annotations({ description: "The model profile called; null for a tool call" }),
  provider: Schema.NullOr(Schema.String).annotations({
    description: "The model's provider (`openai`, `scripted`...); null for a tool call"
  }),
  model: Schema.NullOr(Schema.String).annotations({ description: "The model's name; null for a tool call" }),
  tool_id: Schema.NullOr(Schema.String).annotations({
    description: "The tool called (`tool_...`, or the built-in's name for the memory tools `memory_get` and `memory_put`); " +
      "null for a model call"
  }),
  input_tokens: Schema.Int.annotations({ description: "Tokens the provider counted in the call's prompt (0 for a tool call)" }),
  output_tokens: Schema.Int.annotations({ description: "Tokens the provider counted in the call's answer (0 for a tool call)" }),
  created_at: Timestamp.annotations({ description: "When the step that made the call was committed" })
}).annotations({ identifier: "UsageRecord" })
export type UsageRecord = typeof UsageRecord.Type

export const UsageRecordParams = Schema.Struct({
  from: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; records at or after it (default: 24 h before `to`)" })),
  to: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; records before it (default: now)" })),
  run_id: Schema.optional(RefString.annotations({ description: "Only this run's records" }))
})
export type UsageRecordParams = typeof UsageRecordParams.Type
