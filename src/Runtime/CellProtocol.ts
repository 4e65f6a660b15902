/**
 * The cell's message interface: commands in, replies out. Handlers talk to a cell only through
 * `Cells.send(cellId, command)`, so cells can later become @effect/cluster entities (sharded over
 * nodes) without rewriting callers. Commands and replies are schemas for that reason.
 */
import { Schema } from "effect"
import { EnvironmentName } from "../Domain/Ids.js"

export const CellId = Schema.Struct({ tenantId: Schema.String, environment: EnvironmentName })
export type CellId = typeof CellId.Type

export const cellKey = (id: CellId): string => `${id.tenantId}/${id.environment}`

/** Admit one API request: spend a token of the cell's rate limit. */
export class AdmitRequest extends Schema.TaggedClass<AdmitRequest>()("AdmitRequest", {}) {}

export const RateLimitReply = Schema.Struct({
  allowed: Schema.Boolean,
  limit: Schema.Number,
  remaining: Schema.Number,
  resetSeconds: Schema.Number,
  retryAfterSeconds: Schema.Number,
  policy: Schema.String,
  state: Schema.String
})
export type RateLimitReply = typeof RateLimitReply.Type

/** Read the cell's generation (incremented each time the cell is restored in a new process). */
export class GetGeneration extends Schema.TaggedClass<GetGeneration>()("GetGeneration", {}) {}

export const CellCommand = Schema.Union(AdmitRequest, GetGeneration)
export type CellCommand = typeof CellCommand.Type

export interface CellReplies {
  readonly AdmitRequest: RateLimitReply
  readonly GetGeneration: number
}
export type ReplyOf<C extends CellCommand> = CellReplies[C["_tag"]]
