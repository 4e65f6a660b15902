import { Effect, FiberRef } from "effect"

import type { Principal } from "./Principal.js"

/**
 * Per-request state shared between the outer HTTP pipeline (request id, rate limit, idempotency)
 * and the schema encoders of the envelopes (which stamp `request_id` into every body).
 * One mutable record per request, installed with `Effect.locally` by the pipeline.
 */
export interface RequestState {
  readonly requestId: string
  /** headers the pipeline adds to the final response (Location, Retry-After, RateLimit...) */
  readonly headers: Record<string, string>
  /** set by the pipeline once the service key is authenticated */
  principal: Principal | undefined
  /**
   * set by the pipeline for an idempotent mutation: a digest of its idempotency scope, and whether
   * it took over the reservation of a request that died without answering
   */
  idempotency?: { readonly ref: string; takeover: boolean } | undefined
  /** the user of a valid `X-Actor-Token`, resolved once by the pipeline */
  actingUser?: { readonly type: "user"; readonly id: string } | undefined
}

export const currentRequest = FiberRef.unsafeMake<RequestState>({ requestId: "req_unbound", headers: {}, principal: undefined })

/** The current request's idempotency scope digest and takeover flag, if it is an idempotent mutation. */
export const idempotencyOf: Effect.Effect<{ readonly ref: string; readonly takeover: boolean } | undefined> = Effect.map(
  FiberRef.get(currentRequest),
  (s) => s.idempotency
)

export const requestId: Effect.Effect<string> = Effect.map(FiberRef.get(currentRequest), (s) => s.requestId)

/** Sets a header on the response of the current request (e.g. `Location` on a 202). */
export const setResponseHeader = (name: string, value: string): Effect.Effect<void> =>
  Effect.map(FiberRef.get(currentRequest), (s) => {
    s.headers[name.toLowerCase()] = value
  })
