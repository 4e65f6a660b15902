/**
 * Metrics at the edge (issue 15, deliverable 4): `GET /metrics`, the process's metrics in the
 * Prometheus text format behind the operator token (the same check as `/operator/v1`: a bearer
 * `OPERATOR_TOKEN`, else 401 `invalid_operator_token`), and `requestMetrics`, the HTTP middleware
 * around the whole app (the pipeline included) that counts every answer by operation, method and
 * status and times it. An operation is the HttpApi endpoint's name (`createRun`), found by
 * matching the request against the API's route patterns as the router does (a static segment wins
 * over a parameter), so labels never carry the ids of a raw path; other paths are `metrics`,
 * `docs` or `unmatched`. A request to a tenant's path also gets `tenant_id` on its log lines.
 */
import { HttpApiBuilder, type HttpApiGroup, HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect, Exit } from "effect"

import { Api } from "../Api.js"
import { AuthenticationFailed } from "../Kernel/Errors.js"
import { recordRequest } from "../Observability/Metrics.js"
import * as Prometheus from "../Observability/Prometheus.js"
import { OperatorToken } from "../Operator/Token.js"

interface Route {
  readonly method: string
  readonly operation: string
  /** a segment, or null for a parameter (its name in `params`) */
  readonly segments: ReadonlyArray<string | null>
  readonly params: ReadonlyArray<string | undefined>
}

const route = (method: string, path: string, operation: string): Route => {
  const parts = path.split("/").slice(1)
  return {
    method,
    operation,
    segments: parts.map((p) => (p.startsWith(":") ? null : p)),
    params: parts.map((p) => (p.startsWith(":") ? p.slice(1) : undefined))
  }
}

const ROUTES: ReadonlyArray<Route> = [
  ...(Object.values(Api.groups) as unknown as Array<HttpApiGroup.HttpApiGroup.AnyWithProps>).flatMap((group) =>
    Object.values(group.endpoints).map((e) => route(e.method, e.path, e.name))
  ),
  route("GET", "/metrics", "metrics"),
  route("GET", "/docs", "docs")
]

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])

/** The operation a request routes to, and its path parameters. */
export const operationOf = (method: string, url: string): { readonly operation: string; readonly params: Record<string, string> } => {
  const q = url.indexOf("?")
  const parts = (q === -1 ? url : url.slice(0, q)).split("/").slice(1)
  const wanted = method === "HEAD" ? ["HEAD", "GET"] : [method]
  for (const m of wanted) {
    let best: Route | undefined
    let bestRank: Array<number> | undefined
    for (const r of ROUTES) {
      if (r.method !== m || r.segments.length !== parts.length) continue
      if (!r.segments.every((s, i) => s === null ? parts[i] !== "" : s === parts[i])) continue
      // Like the router: at the first segment where two routes differ, the static one wins.
      const rank = r.segments.map((s) => (s === null ? 1 : 0))
      const differs = bestRank === undefined ? -1 : rank.findIndex((x, i) => x !== bestRank![i])
      if (bestRank === undefined || (differs >= 0 && rank[differs]! < bestRank[differs]!)) {
        best = r
        bestRank = rank
      }
    }
    if (best !== undefined) {
      const params: Record<string, string> = {}
      best.params.forEach((name, i) => {
        if (name !== undefined) params[name] = parts[i]!
      })
      return { operation: best.operation, params }
    }
  }
  return { operation: "unmatched", params: {} }
}

/** Counts and times every answer; an interrupted request (the client went away) counts as 499. */
export const requestMetrics = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const { operation, params } = operationOf(request.method, request.url)
    const method = METHODS.has(request.method) ? request.method : "OTHER"
    const started = performance.now()
    const tenant = params["tenant_id"]
    return yield* app.pipe(
      tenant === undefined ? (effect) => effect : Effect.annotateLogs("tenant_id", tenant.slice(0, 128)),
      Effect.onExit((exit) =>
        recordRequest(
          operation,
          method,
          Exit.isSuccess(exit) ? exit.value.status : Cause.isInterruptedOnly(exit.cause) ? 499 : 500,
          (performance.now() - started) / 1000
        )
      )
    )
  })
)

const bearer = (header: string | undefined) => {
  const match = header === undefined ? null : /^Bearer\s+(.+)$/i.exec(header.trim())
  return match === null ? "" : match[1]!
}

/** `GET /metrics` (operator token). */
export const MetricsRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.flatMap(OperatorToken, (token) =>
    router.get(
      "/metrics",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!token.verify(bearer(request.headers["authorization"]))) {
          return yield* new AuthenticationFailed({ code: "invalid_operator_token", message: "Invalid operator token" })
        }
        return HttpServerResponse.text(yield* Prometheus.scrape, { contentType: Prometheus.CONTENT_TYPE })
      })
    ))
)
