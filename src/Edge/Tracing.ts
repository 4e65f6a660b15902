/**
 * Request spans (issue 15, deliverable 4; exported only when tracing is on, src/Observability/Tracing.ts).
 * @effect/platform's server already wraps every request in a server span (`HttpServer.serve` applies
 * `HttpMiddleware.tracer`, continuing a `traceparent` the client sent) with the method, URL, status,
 * client address and the request and response headers, redacted. Here:
 *   - its name: `http.server <METHOD> <operation>`, the operation as in the metrics (the HttpApi
 *     endpoint's name, `createRun`; `metrics`, `docs`, `unmatched`), never a raw path's ids;
 *   - its attributes `operation`, `http.route` (the route's template) and `tenant_id` (set by the pipeline);
 *   - `x-actor-token` redacted beside @effect/platform's defaults (authorization, cookie, set-cookie,
 *     x-api-key), in spans and wherever headers are logged.
 * SQL statements, model calls and tool calls made for the request are its descendants.
 */
import { Headers, HttpMiddleware, type HttpServerRequest } from "@effect/platform"
import { Effect, FiberRef, Layer } from "effect"

import { methodLabel, requestOperation } from "./Metrics.js"
import { ROUTES } from "./Routes.js"

/** Request headers that carry credentials besides @effect/platform's defaults. */
export const SECRET_HEADERS = ["x-actor-token"] as const

/** operation -> its route's template (`/v1/tenants/:tenant_id/...`). */
const TEMPLATES = new Map(ROUTES.map((r) => [r.operation, `/${r.segments.map((s, i) => s ?? `:${r.params[i]}`).join("/")}`]))

export const requestSpanName = (request: HttpServerRequest.HttpServerRequest): string =>
  `http.server ${methodLabel(request.method)} ${requestOperation(request).operation}`

/** A request's span attributes: its id, operation, route template and tenant. */
export const spanAttributes = (requestId: string, operation: string, tenant: string | undefined): Record<string, unknown> => {
  const route = TEMPLATES.get(operation)
  return {
    request_id: requestId,
    operation,
    ...(route === undefined ? {} : { "http.route": route }),
    ...(tenant === undefined ? {} : { tenant_id: tenant })
  }
}

/**
 * The server layer with its spans named per operation and the secret headers redacted; with
 * tracing off, without the platform's per-request server span at all (its URL parse, headers
 * redaction and context copy cost every request even when the span is dropped).
 */
export const withRequestTracing = <A, E, R>(server: Layer.Layer<A, E, R>): Layer.Layer<A, E, R> =>
  Layer.unwrapEffect(Effect.map(FiberRef.get(FiberRef.currentTracerEnabled), (enabled) =>
    (enabled
      ? HttpMiddleware.withSpanNameGenerator(server, requestSpanName)
      : HttpMiddleware.withTracerDisabledWhen(server, () => true)).pipe(
        Layer.locallyWith(Headers.currentRedactedNames, (names) => [...names, ...SECRET_HEADERS])
      )))
