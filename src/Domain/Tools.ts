/**
 * Customer tool connections and tools (contract 2.3, 3.2, 4.1; D10, D12). Fields the contract
 * does not show are ours.
 */
import { Schema } from "effect"

import { RefString, SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"

const Name = SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200))
/** A tool name as the model sees it: providers accept `^[a-zA-Z0-9_-]{1,64}$` (no dots). */
export const OperationName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, {
    message: () => "must be 1 to 64 letters, digits, '_' or '-' (the name the model calls the tool by)"
  })
)
const JsonSchemaObject = Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
  description: "A JSON Schema (2020-12) object"
})
const OperationPath = Schema.String.pipe(
  Schema.pattern(/^\/[^\s?#]*$/, { message: () => "must be a path starting with '/' (no query or fragment)" }),
  Schema.maxLength(1000)
)

export const Operation = Schema.Struct({
  name: OperationName,
  description: Schema.optional(Schema.String.pipe(Schema.maxLength(2000))),
  effect: Schema.Literal("read", "write"),
  path: OperationPath,
  reconciliation_path: Schema.optional(OperationPath.annotations({
    description: "For writes (required there): may contain the placeholder {operation_id}"
  })),
  input_schema: JsonSchemaObject,
  output_schema: JsonSchemaObject
}).annotations({ identifier: "ConnectionOperation" })
export type Operation = typeof Operation.Type

export const CreateConnection = strictBody(
  Schema.Struct({
    name: Name,
    type: Schema.Literal("customer_https"),
    owner: Schema.Struct({ type: Schema.Literal("tenant") }),
    base_url: SingleLine.pipe(
      Schema.maxLength(2000),
      Schema.pattern(/^[^?#]*$/, {
        message: () => "must not have a query or fragment",
        jsonSchema: { format: "uri", pattern: "^[^?#]*$" }
      })
    ).annotations({
      description: "Public HTTPS URL without a query or fragment; localhost, private, link-local and metadata " +
        "destinations are refused (400 destination_refused)"
    }),
    authentication: Schema.Struct({ type: Schema.Literal("service_signed_request") }),
    operations: Schema.Array(Operation).pipe(Schema.minItems(1), Schema.maxItems(64))
  }).annotations({ identifier: "CreateConnection" })
)
export type CreateConnection = typeof CreateConnection.Type

export const ConnectionStatus = Schema.Literal("pending_review", "active", "rejected")

export const Connection = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("connection"),
  name: Schema.String,
  type: Schema.Literal("customer_https"),
  owner: Schema.Struct({ type: Schema.Literal("tenant") }),
  base_url: Schema.String,
  authentication: Schema.Struct({ type: Schema.Literal("service_signed_request") }),
  operations: Schema.Array(Operation),
  status: ConnectionStatus,
  review_note: Schema.NullOr(Schema.String),
  reviewed_at: Schema.NullOr(Timestamp),
  tool_ids: Schema.Array(Schema.String).annotations({ description: "One immutable tool id per operation, once approved" }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Connection" })

export const Tool = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("tool"),
  connection_id: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  effect: Schema.Literal("read", "write"),
  url: Schema.String.annotations({ description: "The exact URL the service calls (the token's `aud`)" }),
  reconciliation_url: Schema.NullOr(Schema.String),
  input_schema: JsonSchemaObject,
  output_schema: JsonSchemaObject,
  created_at: Timestamp
}).annotations({ identifier: "Tool" })
export type Tool = typeof Tool.Type

export const ToolListParams = Schema.Struct({
  connection_id: Schema.optional(RefString)
})

export const ReviewConnection = strictBody(
  Schema.Struct({
    decision: Schema.Literal("approve", "reject"),
    note: Schema.optional(Schema.String.pipe(Schema.maxLength(2000)))
  }).annotations({ identifier: "ReviewConnection" })
)

// ---- the life of a connection, as data ------------------------------------------------------

export type ConnectionStatus = typeof ConnectionStatus.Type

/** What can happen to a connection: an operator's review (D1). */
export type ConnectionEvent = { readonly _tag: "Review"; readonly decision: "approve" | "reject" }

/** Every transition of a connection; anything else is refused (a reviewed connection stays as reviewed). */
export const CONNECTION_TRANSITIONS: ReadonlyArray<{
  readonly from: ConnectionStatus
  readonly event: ConnectionEvent["_tag"]
  readonly decision: "approve" | "reject"
  readonly to: ConnectionStatus
  /** an approval makes one immutable tool per operation */
  readonly makesTools: boolean
}> = [
  { from: "pending_review", event: "Review", decision: "approve", to: "active", makesTools: true },
  { from: "pending_review", event: "Review", decision: "reject", to: "rejected", makesTools: false }
]

/** The connection's next status and whether tools are made, or undefined when the event does not apply. */
export const connectionTransition = (status: ConnectionStatus, event: ConnectionEvent) =>
  CONNECTION_TRANSITIONS.find((t) => t.from === status && t.event === event._tag && t.decision === event.decision)

// ---- the life of a dispatched write, as data --------------------------------------------------

/** A write the run dispatched (`tool_operations`): its outcome as far as the platform knows it. */
export const OperationStatus = Schema.Literal("dispatched", "succeeded", "failed", "not_found", "unknown")
export type OperationStatus = typeof OperationStatus.Type

/**
 * What can happen to a dispatched write: its answer (or a reconciliation) settles it; an answer
 * nobody can give leaves it `unknown` (the run ends `outcome_unknown`); a later reconciliation
 * pass that learns nothing postpones it.
 */
export type OperationEvent =
  | { readonly _tag: "Settle"; readonly outcome: "succeeded" | "failed" | "not_found" }
  | { readonly _tag: "LoseOutcome" }
  | { readonly _tag: "Postpone" }

export const OPERATION_TRANSITIONS: ReadonlyArray<{
  readonly event: OperationEvent["_tag"]
  readonly from: ReadonlyArray<OperationStatus>
  /** the new status; "outcome" takes the settled outcome */
  readonly to: OperationStatus | "outcome"
}> = [
  { event: "Settle", from: ["dispatched", "unknown"], to: "outcome" },
  { event: "LoseOutcome", from: ["dispatched", "unknown"], to: "unknown" },
  { event: "Postpone", from: ["unknown"], to: "unknown" }
]

/** The status an event leads to, the statuses it may leave from, and whether it settles the write. */
export const operationTransition = (event: OperationEvent) => {
  const row = OPERATION_TRANSITIONS.find((t) => t.event === event._tag)!
  const to: OperationStatus = row.to === "outcome" ? (event as Extract<OperationEvent, { _tag: "Settle" }>).outcome : row.to
  return { to, from: row.from, settled: to !== "unknown" && to !== "dispatched" }
}
