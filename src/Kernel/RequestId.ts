/**
 * The id of the request being served (`X-Request-Id`, `request_id` in every body, D3). The envelope
 * schemas stamp it into the bodies they encode (src/Kernel/Envelope.ts, src/Kernel/Errors.ts): an
 * encoder has no requirements, so the id reaches it as a fiber-local the edge sets for the request,
 * like a log annotation. With it, when the request started (`currentRequestStartedAt`): a call to
 * a cell gives up within CLUSTER_SEND_TIMEOUT_SECONDS of the request's start, however long the
 * request waited before it (issue 41). These two are the only per-request values read that way;
 * what a request may do to its answer and its transaction is the `UnitOfWork` service
 * (src/Kernel/UnitOfWork.ts).
 */
import { type Effect, FiberRef } from "effect"

export const currentRequestId = FiberRef.unsafeMake<string>("req_unbound")

export const requestId: Effect.Effect<string> = FiberRef.get(currentRequestId)

/** When the request being served started (`Date.now()`), 0 outside a request. */
export const currentRequestStartedAt = FiberRef.unsafeMake<number>(0)
