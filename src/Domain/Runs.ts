/** Conversations, runs, run events and usage (contract 2.3, 3.1, 6; decisions D7, D8, D16). */
import { Schema } from "effect"

import { RefString } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { EnvironmentName, Timestamp } from "../Kernel/Ids.js"
import { EventType, RunStatus } from "./RunState.js"

const IdRef = RefString

/** The identity of one tool call of a run: approvals and dispatched writes are recorded by it. */
export const ToolCallOfRun = {
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  run_id: Schema.String,
  tool_call_id: Schema.String,
  tool_id: Schema.String
}

export const Conversation = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("conversation"),
  workspace_id: Schema.String,
  agent_revision_id: Schema.String.annotations({ description: "The pinned, immutable agent revision" }),
  created_at: Timestamp
}).annotations({ identifier: "Conversation" })
export type Conversation = typeof Conversation.Type

export const CreateConversation = strictBody(
  Schema.Struct({
    workspace_id: IdRef,
    agent_revision_id: IdRef.annotations({ description: "A revision of an agent in this workspace" })
  }).annotations({ identifier: "CreateConversation" })
)

/** D19: one text item of a run's input, or of a model's answer, holds at most this many characters. */
export const MAX_RUN_TEXT = 100_000

/**
 * A text content item. Its `text` holds at most 100,000 characters: an input item over it is 400
 * `input_too_large` (checked by the run's admission, so the error names it), a model answer over
 * it ends the run `failed` (`output_too_large`).
 */
export const TextContent = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String.annotations({ jsonSchema: { type: "string", maxLength: MAX_RUN_TEXT } })
}).annotations({ identifier: "TextContent" })
export type TextContent = typeof TextContent.Type

/**
 * An uploaded file as an input item (D13): the model receives it as the provider's own file input
 * (images, PDF) or as text (text, JSON, CSV, XML), else as a line naming it.
 */
export const FileContent = Schema.Struct({
  type: Schema.Literal("file"),
  file_id: IdRef.annotations({ description: "A file of this environment (`POST /files`)" })
}).annotations({ identifier: "FileContent" })
export type FileContent = typeof FileContent.Type

/** A run input item: text, or an uploaded file. */
export const InputContent = Schema.Union(TextContent, FileContent).annotations({
  identifier: "InputContent",
  jsonSchema: { discriminator: { propertyName: "type" } }
})
export type InputContent = typeof InputContent.Type

/** A run holds at most this many file items in its input. */
export const MAX_INPUT_FILES = 10

export const CreateRun = strictBody(
  Schema.Struct({
    input: Schema.Array(InputContent).pipe(Schema.minItems(1), Schema.maxItems(100))
  }).annotations({ identifier: "CreateRun" })
)
export type CreateRun = typeof CreateRun.Type

export const RunUsage = Schema.Struct({
  input_tokens: Schema.Number,
  output_tokens: Schema.Number,
  model_calls: Schema.Number,
  tool_calls: Schema.Number
}).annotations({ identifier: "RunUsage" })

export const Run = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("run"),
  conversation_id: Schema.String,
  agent_revision_id: Schema.String,
  user_id: Schema.NullOr(Schema.String).annotations({
    description: "The user the run acts for: set when it was created with an `X-Actor-Token`; its tool calls " +
      "carry this user as `actor`, and deleting the user stops the run before its next dispatch. Null: the service key acts"
  }),
  status: RunStatus,
  status_reason: Schema.NullOr(Schema.String).annotations({
    description: "Why the run is in its status, e.g. authorization_revoked, start_deadline_exceeded, " +
      "execution_deadline_exceeded, authorization_expired, approval_expired, model_failed, cancelled_by_request"
  }),
  input: Schema.NullOr(Schema.Array(InputContent)),
  output: Schema.NullOr(Schema.Array(TextContent)).annotations({ description: "The final content of a succeeded run" }),
  required_action: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
  usage: RunUsage,
  created_at: Timestamp,
  started_at: Schema.NullOr(Timestamp),
  completed_at: Schema.NullOr(Timestamp),
  start_deadline_at: Timestamp,
  execution_deadline_at: Schema.NullOr(Timestamp),
  authorization_expires_at: Timestamp,
  last_event_id: Schema.NullOr(Schema.String)
}).annotations({ identifier: "Run" })
export type Run = typeof Run.Type

export const RunEvent = Schema.Struct({
  id: Schema.String.annotations({ description: "Usable as `cursor` or `Last-Event-ID`: events after this one" }),
  object: Schema.Literal("run.event"),
  run_id: Schema.String,
  sequence: Schema.Int.annotations({ description: "1, 2, 3... without gaps within a run" }),
  type: EventType,
  created_at: Timestamp,
  data: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "RunEvent" })
export type RunEvent = typeof RunEvent.Type

export const EventListParams = Schema.Struct({
  limit: Schema.optional(Schema.String.pipe(
    Schema.pattern(/^(100|[1-9][0-9]?)$/, { message: () => "limit must be an integer from 1 to 100" })
  )),
  cursor: Schema.optional(Schema.String.annotations({
    description: "An event id or next_cursor of this run: the page starts after it"
  }))
})
