/**
 * The cell's message interface: commands in, replies out, as one `RpcGroup` (`CellRpcs`, below):
 * each command a schema (its payload) with its reply's schema. The cluster entity is made from
 * the group (src/Cells/Entity.ts), and the commands' and replies' types are derived from it, as is
 * `CellHandlers`, the cell's behaviour (one handler per RPC, src/Runtime/Cell.ts).
 * Handlers talk to a cell only through `Cells.send(cellId, command)`.
 */
import { Rpc, RpcGroup } from "@effect/rpc"
import { type Effect, Schema } from "effect"

import { QuotaLimits } from "../Domain/Quotas.js"
import { EnvironmentName } from "../Kernel/Ids.js"

export const CellId = Schema.Struct({ tenantId: Schema.String, environment: EnvironmentName })
export type CellId = typeof CellId.Type

export { cellKey } from "../Kernel/Principal.js"

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

/** Make sure the run's actor is running (after admission, on recovery, after an approval). */
export class StartRun extends Schema.TaggedClass<StartRun>()("StartRun", { runId: Schema.String }) {}

/**
 * The sweep of the cells a node owns (src/Runtime/Recovery.ts): these runs are unfinished in the
 * database; start the actor of each that has none here and is not parked (a lost StartRun).
 */
export class ResumeRuns extends Schema.TaggedClass<ResumeRuns>()("ResumeRuns", { runIds: Schema.Array(Schema.String) }) {}

/**
 * The run is durably `cancel_requested`: interrupt its actor (no new dispatch), then complete the
 * cancellation (`cancelled`). Replies once the run is no longer executing here.
 */
export class CancelRun extends Schema.TaggedClass<CancelRun>()("CancelRun", { runId: Schema.String }) {}

/**
 * The cell's environment (or tenant) is being deleted: stop every run actor and end every
 * unfinished run of the cell (`cancelled`, `environment_deleted`; a write whose outcome is not
 * known ends `outcome_unknown`). Replies once they are ended.
 */
export class EndRuns extends Schema.TaggedClass<EndRuns>()("EndRuns", {}) {}

/** Reserve one SSE stream slot of the cell and of the actor (contract part 8: 128 and 16). */
export class OpenStream extends Schema.TaggedClass<OpenStream>()("OpenStream", { actorId: Schema.String }) {}
export const OpenStreamReply = Schema.Union(
  Schema.Struct({ opened: Schema.Literal(true) }),
  Schema.Struct({ opened: Schema.Literal(false), limit: Schema.Literal("cell", "actor") })
)
export type OpenStreamReply = typeof OpenStreamReply.Type

/** Release a slot taken by OpenStream. */
export class CloseStream extends Schema.TaggedClass<CloseStream>()("CloseStream", { actorId: Schema.String }) {}

/**
 * The cell's quota limits (D16), held beside its rate limiter: an admission (a run, an upload)
 * counts against them in its own statement (src/Quotas/Queries.ts).
 */
export class GetQuotaLimits extends Schema.TaggedClass<GetQuotaLimits>()("GetQuotaLimits", {}) {}

/** The commands of no fields sent per request, made once (making one validates it: a decode per request). */
export const admitRequest = new AdmitRequest()
export const getQuotaLimits = new GetQuotaLimits()

/** An operator changed a limit of the cell: read them again. */
export class ReloadQuotaLimits extends Schema.TaggedClass<ReloadQuotaLimits>()("ReloadQuotaLimits", {}) {}

/** What the cell holds now (operators; tests of "no fiber while waiting"). */
export class GetCellStats extends Schema.TaggedClass<GetCellStats>()("GetCellStats", {}) {}
export const CellStats = Schema.Struct({
  generation: Schema.Number,
  /** run actors (fibers) executing */
  running_actors: Schema.Number,
  /** runs parked with a timer (waiting for an approval) and no fiber */
  parked_runs: Schema.Number,
  /** open SSE streams */
  streams: Schema.Number
})
export type CellStats = typeof CellStats.Type

/** The protocol: one RPC per command, its payload the command's schema, its success the reply's. */
export const CellRpcs = RpcGroup.make(
  Rpc.make("AdmitRequest", { payload: AdmitRequest, success: RateLimitReply }),
  Rpc.make("GetGeneration", { payload: GetGeneration, success: Schema.Number }),
  Rpc.make("StartRun", { payload: StartRun }),
  Rpc.make("ResumeRuns", { payload: ResumeRuns }),
  Rpc.make("CancelRun", { payload: CancelRun }),
  Rpc.make("EndRuns", { payload: EndRuns }),
  Rpc.make("OpenStream", { payload: OpenStream, success: OpenStreamReply }),
  Rpc.make("CloseStream", { payload: CloseStream }),
  Rpc.make("GetQuotaLimits", { payload: GetQuotaLimits, success: QuotaLimits }),
  Rpc.make("ReloadQuotaLimits", { payload: ReloadQuotaLimits }),
  Rpc.make("GetCellStats", { payload: GetCellStats, success: CellStats })
)
type CellRpc = RpcGroup.Rpcs<typeof CellRpcs>

/** A command of the protocol (the payload of one of its RPCs). */
export type CellCommand = Rpc.Payload<CellRpc>

/** The commands' names (the RPCs' tags). */
export type CellTag = CellRpc["_tag"]

/**
 * The command named `K` (its RPC's payload). Its `_tag` is stated as `K` too, so that `K` is
 * inferred from a command (`send(id, new StartRun(...))`: `K` is "StartRun").
 */
export type Command<K extends CellTag> = Rpc.Payload<Rpc.ExtractTag<CellRpc, K>> & { readonly _tag: K }

/** What the cell replies to the command named `K` (its RPC's success). */
export type Reply<K extends CellTag> = Rpc.Success<Rpc.ExtractTag<CellRpc, K>>

/**
 * The cell's behaviour: a handler per RPC of the group, from its command to its reply
 * (src/Runtime/Cell.ts implements it; the entity and the local shortcut both call it).
 */
export type CellHandlers = { readonly [K in CellTag]: (command: Command<K>) => Effect.Effect<Reply<K>> }

/** Calls the handler of a command: `handlers[command._tag](command)`, typed by its name. */
export const dispatch = <K extends CellTag>(handlers: CellHandlers, command: Command<K>): Effect.Effect<Reply<K>> => {
  const tag: K = command._tag
  return handlers[tag](command)
}
