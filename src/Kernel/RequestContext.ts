import type { HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef, type Option } from "effect"

import type { Conflict } from "./Errors.js"
import type { CellRef, Principal } from "./Principal.js"

/**
 * Per-request state shared between the outer HTTP pipeline (request id, rate limit, idempotency)
 * and what runs inside it: the envelope encoders (which stamp `request_id` into every body), the
 * handler combinators (which pass the idempotency gate once a request is known to be valid), and
 * services (which ask for work to happen once the request's transaction committed). One mutable
 * record per request, installed with `Effect.locally` by the pipeline.
 */
export interface RequestState {
  readonly requestId: string
  /** headers the pipeline adds to the final response (Location, Retry-After, RateLimit...) */
  readonly headers: Record<string, string>
  /** set by the pipeline once the service key is authenticated */
  principal: Principal | undefined
  /** the user of a valid `X-Actor-Token`, resolved once by the pipeline */
  actingUser?: { readonly type: "user"; readonly id: string } | undefined
  /** an idempotent mutation: its gate, passed by the handler once the request is known valid */
  idempotency?: IdempotencyGate | undefined
  /** an idempotent mutation runs in one transaction: effects to run once it committed */
  afterCommit?: Array<Effect.Effect<void>> | undefined
  /** what may answer instead of the stored response once the transaction committed (`Prefer: wait`) */
  continuation?: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>> | undefined
  /** an operator request: the tenant and environment it is about when its path does not name them (audit) */
  auditSubject?: CellRef | undefined
}

/**
 * The Idempotency-Key of a mutation (D5, D19), checked after routing, authentication, rate limits,
 * scopes and validation: a stored response to replay, none (execute), or 409 (in use, reused).
 */
export interface IdempotencyGate {
  readonly check: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>, Conflict>
  /** how the check ended: not reached, passed (execute), replayed, or refused (409) */
  outcome: "pending" | "passed" | "replayed" | "refused"
}

export const currentRequest = FiberRef.unsafeMake<RequestState>({ requestId: "req_unbound", headers: {}, principal: undefined })

export const requestId: Effect.Effect<string> = Effect.map(FiberRef.get(currentRequest), (s) => s.requestId)

/** Sets a header on the response of the current request (e.g. `Location` on a 202). */
export const setResponseHeader = (name: string, value: string): Effect.Effect<void> =>
  Effect.map(FiberRef.get(currentRequest), (s) => {
    s.headers[name.toLowerCase()] = value
  })

/** The current mutation's idempotency gate: a stored response to replay, or none to go on. */
export const idempotencyGate: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>, Conflict> = Effect
  .flatMap(FiberRef.get(currentRequest), (s) => s.idempotency?.check ?? Effect.succeedNone)

/**
 * Runs `effect` once the current request's transaction committed (a cell told to start a run must
 * find it committed); outside such a transaction it runs now.
 */
export const afterCommit = (effect: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(currentRequest), (s) => {
    if (s.afterCommit === undefined) return effect
    s.afterCommit.push(effect)
    return Effect.void
  })

/**
 * After the commit, `continuation` may answer instead of the stored response (none: the stored one
 * stands). Outside an idempotent mutation it is not used.
 */
export const continueAfterCommit = (
  continuation: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>>
): Effect.Effect<void> =>
  Effect.map(FiberRef.get(currentRequest), (s) => {
    s.continuation = continuation
  })

/** Whether the current request is an idempotent mutation running in its transaction. */
export const inRequestTransaction: Effect.Effect<boolean> = Effect.map(FiberRef.get(currentRequest), (s) => s.afterCommit !== undefined)

/**
 * Names the tenant and environment the current operator request is about, for its audit entry
 * (D16), when its path does not (a connection's review, a pilot's approval).
 */
export const auditAbout = (cell: CellRef): Effect.Effect<void> =>
  Effect.map(FiberRef.get(currentRequest), (s) => {
    s.auditSubject = { tenantId: cell.tenantId, environment: cell.environment }
  })
