/**
 * The id of the request being served (`X-Request-Id`, `request_id` in every body, D3). The envelope
 * schemas stamp it into the bodies they encode (src/Kernel/Envelope.ts, src/Kernel/Errors.ts): an
 * encoder has no requirements, so the id reaches it as a fiber-local the edge sets for the request,
 * like a log annotation. It is the only per-request value read that way; what a request may do to
 * its answer and its transaction is the `UnitOfWork` service (src/Kernel/UnitOfWork.ts).
 */
import { type Effect, FiberRef } from "effect"

export const currentRequestId = FiberRef.unsafeMake<string>("req_unbound")

export const requestId: Effect.Effect<string> = FiberRef.get(currentRequestId)
