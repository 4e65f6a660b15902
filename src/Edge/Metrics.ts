/**
 * Metrics at the edge (issue 15, deliverable 4): `GET /metrics`, the process's metrics in the
 * Prometheus text format behind the operator token (the same check as `/operator/v1`: a bearer
 * `OPERATOR_TOKEN`, else 401 `invalid_operator_token`). The pipeline (src/Edge/Pipeline.ts) counts
 * every answer by operation, method and status and times it. An operation is the HttpApi
 * endpoint's name (`createRun`), matched as the pipeline routes (`Routes.matchRoute`), so labels
 * never carry the ids of a raw path; other paths are `metrics`, `docs`, `console` or `unmatched`. The
 * database pool's gauges are set from the pool at each scrape, the event loop's from its delays since
 * the previous scrape.
 */
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { DatabasePool } from "../Database/Client.js"
import { AuthenticationFailed } from "../Kernel/Errors.js"
import { RESOURCES, Shares } from "../Kernel/Shares.js"
import { EventLoop } from "../Observability/EventLoop.js"
import { recordPool, recordShares } from "../Observability/Metrics.js"
import * as Prometheus from "../Observability/Prometheus.js"
import { OperatorToken } from "../Operator.js"
import { matchRoute, ROUTES } from "./Routes.js"
import { requestState } from "./UnitOfWork.js"

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])

/** A request's method as a bounded label (metrics, span names). */
export const methodLabel = (method: string): string => (METHODS.has(method) ? method : "OTHER")

export interface RequestOperation {
  readonly operation: string
  readonly params: Record<string, string>
}

/** The operation a request routes to (`unmatched` if none), and its path parameters. */
export const operationOf = (method: string, url: string): RequestOperation => {
  const q = url.indexOf("?")
  const path = q === -1 ? url : url.slice(0, q)
  const match = matchRoute(ROUTES, method, path)
  return match._tag === "Found" ? { operation: match.operation, params: match.params } : { operation: unmatchedOperation(path), params: {} }
}

/** A path no operation has: one label for each console's pages, else `unmatched`. */
export const unmatchedOperation = (path: string): string =>
  path === "/console" || path.startsWith("/console/")
    ? "console"
    : path === "/operator/console" || path.startsWith("/operator/console/")
    ? "operator_console"
    : "unmatched"

const matched = new WeakMap<HttpServerRequest.HttpServerRequest, RequestOperation>()

/** `operationOf` a request, matched once: its metrics, its span's name and attributes share it. */
export const requestOperation = (request: HttpServerRequest.HttpServerRequest): RequestOperation => {
  let found = matched.get(request)
  if (found === undefined) {
    found = operationOf(request.method, request.url)
    matched.set(request, found)
  }
  return found
}

/** The token of an `Authorization: Bearer <token>` header ("" when there is none). */
export const bearerToken = (header: string | undefined) => {
  const match = header === undefined ? null : /^Bearer\s+(.+)$/i.exec(header.trim())
  return match === null ? "" : match[1]!
}

/** `GET /metrics` (operator token). */
export const MetricsRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.flatMap(Effect.all([OperatorToken, AppConfig]), ([token, config]) =>
    router.get(
      "/metrics",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        // the pipeline resolved the token already (one lookup of a personal token per request); else now
        const who = (yield* requestState)?.operator ?? (yield* token.whoIs(bearerToken(request.headers["authorization"])))
        if (who === undefined) {
          return yield* new AuthenticationFailed({ code: "invalid_operator_token", message: "Invalid operator token" })
        }
        // the pool's counts are read now, not sampled: a scrape sees the pool as it is
        const pool = yield* Effect.serviceOption(DatabasePool)
        if (Option.isSome(pool)) yield* Effect.flatMap(pool.value.stats, recordPool)
        // the event loop's delays since the previous scrape
        const loop = yield* Effect.serviceOption(EventLoop)
        if (Option.isSome(loop)) yield* loop.value.record
        // the node's fair shares (issue 36), per cell when the operator turned cell labels on
        const shares = yield* Effect.serviceOption(Shares)
        if (Option.isSome(shares)) {
          const perCell = config.shares.cellLabels
          yield* recordShares(RESOURCES.map((resource) => {
            const { capacity, inUse, keys, waiting } = shares.value.of(resource).stats()
            return { resource, capacity, inUse, waiting, ...(perCell ? { cells: keys } : {}) }
          }))
        }
        return HttpServerResponse.text(yield* Prometheus.scrape, { contentType: Prometheus.CONTENT_TYPE })
      })
    ))
)
