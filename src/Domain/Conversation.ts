/**
 * The conversation an agent sees, as the run actor persists it (JSON conversation items), and what
 * one model step answers (final text or proposed tool calls, with usage).
 */
import { Schema } from "effect"

/** A file of the run's input (D13), as the conversation records it; its bytes are read when a model is called. */
export const InputFile = Schema.Struct({
  file_id: Schema.String,
  filename: Schema.String,
  content_type: Schema.String,
  bytes: Schema.Number
})
export type InputFile = typeof InputFile.Type

export const UserMessage = Schema.Struct({
  type: Schema.Literal("user_message"),
  text: Schema.String,
  files: Schema.optional(Schema.Array(InputFile))
})
export const AssistantMessage = Schema.Struct({ type: Schema.Literal("assistant_message"), text: Schema.String })
/** A tool call the model proposed (in an earlier step). */
export const ToolCallItem = Schema.Struct({
  type: Schema.Literal("tool_call"),
  call_id: Schema.String,
  name: Schema.String,
  input: Schema.Unknown
})
/** The outcome of a tool call; `output` is any JSON value. */
export const ToolResultItem = Schema.Struct({
  type: Schema.Literal("tool_result"),
  call_id: Schema.String,
  name: Schema.String,
  output: Schema.Unknown,
  is_error: Schema.Boolean
})
export const ConversationItem = Schema.Union(UserMessage, AssistantMessage, ToolCallItem, ToolResultItem).annotations({
  identifier: "ConversationItem"
})
export type ConversationItem = typeof ConversationItem.Type

/** A tool the agent may call: its name, description and the JSON Schema (an object) of its input. */
export const ToolDefinition = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1)),
  description: Schema.optional(Schema.String),
  input_schema: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "ToolDefinition" })
export type ToolDefinition = typeof ToolDefinition.Type

const Count = Schema.Number.pipe(Schema.int(), Schema.nonNegative())
export const Usage = Schema.Struct({ input_tokens: Count, output_tokens: Count, model_calls: Count }).annotations({
  identifier: "Usage"
})
export type Usage = typeof Usage.Type

/** A file the model produced with its answer (D13), its bytes as base64. */
export const ProducedFile = Schema.Struct({ filename: Schema.String, content_type: Schema.String, data: Schema.String })
export type ProducedFile = typeof ProducedFile.Type

export const ProposedCall = Schema.Struct({ call_id: Schema.String, name: Schema.String, input: Schema.Unknown })
export type ProposedCall = typeof ProposedCall.Type

/** The model answered: the run's final content. */
export const Final = Schema.TaggedStruct("Final", {
  text: Schema.String,
  files: Schema.optional(Schema.Array(ProducedFile)),
  usage: Usage,
  provider_request_id: Schema.optional(Schema.String)
})
export type Final = typeof Final.Type
/** The model proposed tool calls (unexecuted), possibly with some text besides. */
export const ToolCalls = Schema.TaggedStruct("ToolCalls", {
  calls: Schema.NonEmptyArray(ProposedCall),
  text: Schema.optional(Schema.String),
  files: Schema.optional(Schema.Array(ProducedFile)),
  usage: Usage,
  provider_request_id: Schema.optional(Schema.String)
})
export type ToolCalls = typeof ToolCalls.Type
export const StepResult = Schema.Union(Final, ToolCalls).annotations({ identifier: "StepResult" })
export type StepResult = typeof StepResult.Type
