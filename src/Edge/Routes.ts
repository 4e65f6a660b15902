/**
 * The routes of the HttpApi, read once from its definition (so a route added later is known without
 * editing this file), for what must be known of a request before it reaches the router:
 *   - the pipeline answers a `/v1` path no operation has with 404 `route_not_found`, and a path
 *     some operation has, with another method, with 405 `method_not_allowed` and `Allow`, before
 *     anything that depends on the key (issue 15, D19 "routing before authentication");
 *   - request metrics label a request with its operation (the endpoint's name, `createRun`) and
 *     annotate its logs with the path's `tenant_id`, never with a raw path's ids;
 *   - audit entries name the operation and the resource the path names (`AuditTrail`).
 * Matching is the router's: segment by segment, and where two routes differ first, the static
 * segment wins over a parameter.
 */
import { HttpApi, HttpApiSchema } from "@effect/platform"
import { Context, Option } from "effect"

import { Api } from "../Api.js"
import { GateAhead } from "../Kernel/UnitOfWork.js"

export interface Route {
  readonly method: string
  readonly operation: string
  /** a static segment, or null for a parameter (its name in `params`) */
  readonly segments: ReadonlyArray<string | null>
  readonly params: ReadonlyArray<string | undefined>
  /** its body is a `multipart/form-data` upload (the payload schema is HttpApiSchema.Multipart) */
  readonly multipart?: boolean
  /** its idempotency gate may be sent ahead (`GateAhead`) */
  readonly gateAhead?: boolean
}

export type RouteMatch =
  | { readonly _tag: "Found"; readonly operation: string; readonly route: Route; readonly params: Record<string, string> }
  | { readonly _tag: "NoRoute" }
  | { readonly _tag: "WrongMethod"; readonly allow: ReadonlyArray<string> }

export const route = (method: string, path: string, operation: string): Route => {
  const parts = path.split("/").slice(1)
  return {
    method,
    operation,
    segments: parts.map((p) => (p.startsWith(":") ? null : p)),
    params: parts.map((p) => (p.startsWith(":") ? p.slice(1) : undefined))
  }
}

/** The routes of `api`, with extra ones served beside it (the OpenAPI document, /metrics, /docs). */
export const routesOf = (api: HttpApi.HttpApi.Any, extra: ReadonlyArray<Route> = []): ReadonlyArray<Route> => {
  const routes: Array<Route> = [...extra]
  HttpApi.reflect(api as any, {
    onGroup: () => undefined,
    onEndpoint: ({ endpoint }) => {
      const multipart = Option.exists(endpoint.payloadSchema, (s) => HttpApiSchema.getMultipart(s.ast) !== undefined)
      const gateAhead = Option.getOrElse(Context.getOption(endpoint.annotations, GateAhead), () => false)
      routes.push({ ...route(endpoint.method, endpoint.path, endpoint.name), multipart, gateAhead })
    }
  })
  return routes
}

const fits = (r: Route, parts: ReadonlyArray<string>) =>
  r.segments.length === parts.length && r.segments.every((s, i) => (s === null ? parts[i] !== "" : s === parts[i]))

/** Of the routes that fit, the router's choice: at the first segment where two differ, the static one. */
const best = (candidates: ReadonlyArray<Route>): Route | undefined => {
  let chosen: Route | undefined
  for (const r of candidates) {
    const differs = chosen === undefined ? -1 : r.segments.findIndex((s, i) => (s === null) !== (chosen!.segments[i] === null))
    if (chosen === undefined || (differs >= 0 && r.segments[differs] !== null)) chosen = r
  }
  return chosen
}

/** Routes by their number of segments: a request is compared with the routes of its length only. */
const indexes = new WeakMap<ReadonlyArray<Route>, Map<number, ReadonlyArray<Route>>>()
const indexOf = (routes: ReadonlyArray<Route>) => {
  let index = indexes.get(routes)
  if (index === undefined) {
    const byLength = new Map<number, Array<Route>>()
    for (const r of routes) {
      const bucket = byLength.get(r.segments.length)
      if (bucket === undefined) byLength.set(r.segments.length, [r])
      else bucket.push(r)
    }
    index = byLength
    indexes.set(routes, index)
  }
  return index
}

/** How `method path` meets the routes (HEAD is served wherever GET is). */
export const matchRoute = (routes: ReadonlyArray<Route>, method: string, path: string): RouteMatch => {
  const parts = path.split("/").slice(1)
  const here = (indexOf(routes).get(parts.length) ?? []).filter((r) => fits(r, parts))
  if (here.length === 0) return { _tag: "NoRoute" }
  const chosen = best(here.filter((r) => r.method === method)) ??
    (method === "HEAD" ? best(here.filter((r) => r.method === "GET")) : undefined)
  if (chosen === undefined) {
    const allow = [...new Set(here.map((r) => r.method))]
    if (allow.includes("GET")) allow.push("HEAD")
    return { _tag: "WrongMethod", allow }
  }
  const params: Record<string, string> = {}
  chosen.params.forEach((name, i) => {
    if (name !== undefined) params[name] = parts[i]!
  })
  return { _tag: "Found", operation: chosen.operation, route: chosen, params }
}

/** The service's routes: the HttpApi's, and those served beside it (the OpenAPI document, /metrics, /docs). */
export const ROUTES = routesOf(Api, [
  route("GET", "/v1/openapi.json", "openapi"),
  route("GET", "/metrics", "metrics"),
  route("GET", "/docs", "docs")
])
