/**
 * Workspace memory (D14): a key/value store per workspace, shared by its agents across
 * conversations, with a version per key for optimistic concurrency. Customers reach it over HTTP;
 * agents whose revision has `memory: true` through the built-in tools `memory_get` and
 * `memory_put` (their definitions are here, as the model sees them).
 */
import { Schema } from "effect"

import { ListParams } from "../Kernel/Cursor.js"
import { Timestamp } from "../Kernel/Ids.js"
import { FORBIDDEN_IN_TEXT, MAX_JSON_DEPTH } from "../Kernel/Strings.js"

/** A key: 1..128 of `[A-Za-z0-9._:-]` (namespace with `:` or `.`; no `/`). */
export const KEY_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/
const PREFIX_PATTERN = /^[A-Za-z0-9._:-]{0,128}$/

/** The largest value: the UTF-8 bytes of its JSON serialisation (64 KiB exactly is accepted). */
export const MAX_VALUE_BYTES = 64 * 1024

/** A version `if_version` may name (the stored version is a Postgres `integer`). */
const MAX_VERSION = 2_147_483_647

/** A value as stored, and its size: the UTF-8 bytes of its JSON serialisation. */
export const serialised = (value: unknown): { readonly json: string; readonly bytes: number } => {
  const json = JSON.stringify(value) ?? "null"
  return { json, bytes: Buffer.byteLength(json, "utf8") }
}

/** How deep a value may nest (D19: the value itself is level 1). */
const MAX_DEPTH = MAX_JSON_DEPTH

/**
 * Why an agent's value cannot be stored, or undefined: a string or key holding what a request body
 * may not (the HTTP pipeline refuses such a body before it reaches the service), or nesting deeper
 * than 64 levels. Deeper levels are not walked.
 */
export const valueProblem = (value: unknown, path = "value", depth = 1): string | undefined => {
  if (typeof value === "string") return FORBIDDEN_IN_TEXT.test(value) ? `${path}: holds a control character or a lone surrogate` : undefined
  if (value === null || typeof value !== "object") return undefined
  if (depth > MAX_DEPTH) return `${path}: nests deeper than ${MAX_DEPTH} levels`
  const entries: Array<[string, unknown]> = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value)
  for (const [k, v] of entries) {
    if (FORBIDDEN_IN_TEXT.test(k)) return `${path}: a key holds a control character or a lone surrogate`
    const problem = valueProblem(v, `${path}.${k}`, depth + 1)
    if (problem !== undefined) return problem
  }
  return undefined
}

export const MemoryKey = Schema.String.pipe(
  Schema.pattern(KEY_PATTERN, { message: () => "must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'" })
).annotations({ description: "1 to 128 characters of `[A-Za-z0-9._:-]`; namespace with `:` or `.` (e.g. `customer:42.tone`)" })

/** Who wrote an item: the acting user or the API key of a request, or the run of an agent's `memory_put`. */
export const UpdatedBy = Schema.Struct({
  type: Schema.Literal("api_key", "user", "run"),
  id: Schema.String
}).annotations({
  identifier: "MemoryUpdatedBy",
  description: "Who wrote the current version: the user of the request's `X-Actor-Token`, else its API key; a run for an " +
    "agent's `memory_put`"
})
export type UpdatedBy = typeof UpdatedBy.Type

export const MemoryItem = Schema.Struct({
  object: Schema.Literal("memory_item"),
  key: Schema.String,
  value: Schema.Unknown.annotations({ description: "The stored JSON value, as written" }),
  version: Schema.Int.annotations({ description: "1 for a new key, one more on every write of it" }),
  updated_at: Timestamp,
  updated_by: UpdatedBy
}).annotations({ identifier: "MemoryItem" })
export type MemoryItem = typeof MemoryItem.Type

export const PutMemoryItem = Schema.Struct({
  value: Schema.Unknown.annotations({
    description: "Any JSON value (null included), at most 64 KiB as the UTF-8 bytes of its JSON serialisation"
  }),
  if_version: Schema.optional(
    Schema.Int.pipe(Schema.between(0, MAX_VERSION, { message: () => "must be an integer from 0 to 2147483647" }))
  ).annotations({
    description: "Write only if the key's current version is this one (409 `version_conflict` otherwise). `0`: only if the " +
      "key does not exist (create only). Omitted: write whatever the current version"
  })
}).annotations({
  identifier: "PutMemoryItem",
  // fields it does not name are refused (D19); `value` must be present, even as null
  parseOptions: { onExcessProperty: "error", exact: true }
})
export type PutMemoryItem = typeof PutMemoryItem.Type

export const DeletedMemoryItem = Schema.Struct({
  object: Schema.Literal("memory_item"),
  key: Schema.String,
  deleted: Schema.Literal(true)
}).annotations({ identifier: "DeletedMemoryItem" })

export const MemoryListParams = Schema.Struct({
  ...ListParams.fields,
  prefix: Schema.optional(
    Schema.String.pipe(Schema.pattern(PREFIX_PATTERN, { message: () => "must be at most 128 characters of [A-Za-z0-9._:-]" }))
  ).annotations({ description: "Only keys that start with this (empty: every key)" })
})
export type MemoryListParams = typeof MemoryListParams.Type

// ---- the built-in tools ------------------------------------------------------------------------

export const MEMORY_TOOL_NAMES = ["memory_get", "memory_put"] as const
export type MemoryToolName = typeof MEMORY_TOOL_NAMES[number]

export const isMemoryTool = (name: string): name is MemoryToolName => (MEMORY_TOOL_NAMES as ReadonlyArray<string>).includes(name)

const keySchema = {
  type: "string",
  pattern: KEY_PATTERN.source,
  description: "1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-' (not '.' or '..'); namespace with ':' or '.'"
}

/** The built-in tools as the model is offered them (name, description, JSON Schema of the input). */
export const MEMORY_TOOLS = [
  {
    name: "memory_get",
    description: "Read an item of this workspace's shared memory (kept across conversations). Answers {key, value, " +
      "version}, or {key, found: false} when nothing is stored under the key.",
    input_schema: { type: "object", properties: { key: keySchema }, required: ["key"], additionalProperties: false }
  },
  {
    name: "memory_put",
    description: "Store a JSON value under a key in this workspace's shared memory (kept across conversations; other " +
      "conversations of the workspace see it). Replaces any previous value. At most 64 KiB. Answers {key, version}.",
    input_schema: {
      type: "object",
      properties: { key: keySchema, value: { description: "Any JSON value" } },
      required: ["key", "value"],
      additionalProperties: false
    }
  }
] as const satisfies ReadonlyArray<{ name: MemoryToolName; description: string; input_schema: Record<string, unknown> }>

/**
 * A key an agent may use: also not `.` or `..`, which no URL path can carry (the HTTP API answers
 * 404 for such a segment), so every item an agent writes can be read and deleted over HTTP.
 */
const ToolKey = MemoryKey.pipe(
  Schema.filter((k) => k !== "." && k !== "..", { message: () => "must not be '.' or '..'" })
)

/** A tool call's input as the built-ins accept it (anything else is a tool error the model reads). */
export const MemoryGetInput = Schema.Struct({ key: ToolKey })
export const MemoryPutInput = Schema.Struct({ key: ToolKey, value: Schema.Unknown })
