/**
 * The edge's side of the unit of work (src/Kernel/UnitOfWork.ts): the state of the request being
 * served (its id, the headers its answer gets, its principal and acting user, its idempotency gate,
 * the work waiting for its commit, its continuation, its audit subject), made by the pipeline
 * (src/Edge/Pipeline.ts) and read by the `UnitOfWork` service that handlers and services require.
 *
 * The service is made once for the node; the request it acts on is the one the calling fiber
 * serves (`serve` marks a request's fiber with its state). Outside a request (a run actor, a
 * background loop) it acts as a unit of its own: after-commit work runs at once, headers go nowhere.
 */
import type { HttpServerResponse } from "@effect/platform"
import type { Statement } from "@effect/sql"
import { Effect, FiberRef, Layer, Option } from "effect"

import type { Conflict } from "../Kernel/Errors.js"
import { annotateOwn } from "../Kernel/OwnFiber.js"
import type { CellRef, Principal } from "../Kernel/Principal.js"
import { currentRequestId, currentRequestStartedAt } from "../Kernel/RequestId.js"
import { type ActingUser, type RefineReplay, UnitOfWork, type UnitOfWorkShape } from "../Kernel/UnitOfWork.js"
import type { Gate } from "./Idempotency.js"

/** A read that rides the transaction's last statement, and the row it found there. */
export interface ReadAlong {
  readonly read: Statement.Fragment
  row?: unknown
}

export interface RequestState {
  readonly requestId: string
  /** when the request reached the server (`Date.now()`): its calls to cells give up within the send timeout of it */
  readonly startedAt: number
  /** headers the pipeline adds to the final response (Location, Retry-After, RateLimit...) */
  readonly headers: Record<string, string>
  /** set by the pipeline once the service key is authenticated */
  principal: Principal | undefined
  /** the user of a valid `X-Actor-Token`, resolved once by the pipeline */
  actingUser?: ActingUser | undefined
  /** an idempotent mutation's gate, passed by its handler once the request is known valid */
  gate?: Gate | undefined
  /** an idempotent mutation runs in one transaction: effects to run once it committed */
  afterCommit?: Array<Effect.Effect<void>> | undefined
  /** writes of that transaction sent with its last statement (`UnitOfWork.withCommit`) */
  withCommit?: Array<Statement.Fragment> | undefined
  /** reads of that transaction sent with its last statement, each given its row once it ran (`UnitOfWork.readWithCommit`) */
  readsWithCommit?: Array<ReadAlong> | undefined
  /** what may answer instead of the stored response once the transaction committed (`Prefer: wait`) */
  continuation?: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>> | undefined
  /** an operator request: the tenant and environment it is about when its path does not name them (audit) */
  auditSubject?: CellRef | undefined
  /** an operator request, once its token is resolved: `operator` (the shared token) or the operator account's id (issue 39) */
  operator?: string | undefined
}

const currentState = FiberRef.unsafeMake<RequestState | undefined>(undefined)

/**
 * Makes the calling fiber, from now on, the one serving the request of `state` (its state, id and
 * arrival, its log lines' `request_id` and, given, `tenant_id`; fibers it forks inherit them). For
 * the request's own fiber, which the server forks for it and which ends with it: set, not scoped
 * and restored (which costs a request a dozen effects per value).
 */
export const serve = (state: RequestState, tenant: string | undefined): Effect.Effect<void> =>
  Effect.all([
    FiberRef.set(currentState, state),
    FiberRef.set(currentRequestId, state.requestId),
    FiberRef.set(currentRequestStartedAt, state.startedAt),
    annotateOwn({ request_id: state.requestId, tenant_id: tenant })
  ], { discard: true })

/** The state of the request the calling fiber serves (undefined outside one). */
export const requestState: Effect.Effect<RequestState | undefined> = FiberRef.get(currentState)

/** `f` of the state of the request the calling fiber serves, read in the same step. */
const withState = <A, E = never, R = never>(f: (state: RequestState | undefined) => Effect.Effect<A, E, R>) =>
  Effect.withFiberRuntime<A, E, R>((fiber) => f(fiber.getFiberRef(currentState)))

/** `f` of that state, done in the same step (an answer at once). */
const onState = <A>(f: (state: RequestState | undefined) => A) =>
  Effect.withFiberRuntime<A>((fiber) => Effect.succeed(f(fiber.getFiberRef(currentState))))

/** A mutation's gate (a read has none): a stored response instead of `run`, a 409, or `run`. */
const gated = <A, E, R>(
  run: Effect.Effect<A, E, R>,
  refine?: RefineReplay
): Effect.Effect<A | HttpServerResponse.HttpServerResponse, E | Conflict, R> =>
  withState((state): Effect.Effect<A | HttpServerResponse.HttpServerResponse, E | Conflict, R> => {
    const gate = state?.gate
    if (gate === undefined) return run
    return Effect.flatMap(
      gate.check(refine),
      Option.match({ onNone: () => run, onSome: (replay) => Effect.succeed<A | HttpServerResponse.HttpServerResponse>(replay) })
    )
  })

const unitOfWork: UnitOfWorkShape = {
  gated,
  setHeader: (name, value) =>
    onState((state) => {
      if (state !== undefined) state.headers[name.toLowerCase()] = value
    }),
  afterCommit: (effect) =>
    withState((state) => {
      if (state?.afterCommit === undefined) return effect
      state.afterCommit.push(effect)
      return Effect.void
    }),
  withCommit: (write) =>
    onState((state) => {
      if (state?.withCommit === undefined) return false
      state.withCommit.push(write)
      return true
    }),
  readWithCommit: (read) =>
    onState((state) => {
      if (state?.readsWithCommit === undefined) return undefined
      const along: ReadAlong = { read }
      state.readsWithCommit.push(along)
      return () => along.row
    }),
  answerAfterCommit: (continuation) =>
    onState((state) => {
      if (state !== undefined) state.continuation = continuation
    }),
  about: (cell) =>
    onState((state) => {
      if (state !== undefined) state.auditSubject = { tenantId: cell.tenantId, environment: cell.environment }
    }),
  actingUser: onState((state) => state?.actingUser),
  operator: onState((state) => state?.operator)
}

/** The node's `UnitOfWork`: the request the calling fiber serves, or a unit of its own. */
export const UnitOfWorkLive = Layer.succeed(UnitOfWork, unitOfWork)
