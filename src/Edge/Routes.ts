/**
 * The `/v1` routes of the HttpApi, for answering a wrong URL or method before anything that
 * depends on the key (issue 15, D19 "routing before authentication"): a path no operation has is
 * 404 `route_not_found`; a path some operation has, with another method, is 405
 * `method_not_allowed` with `Allow` listing the methods it has. Built once from the HttpApi
 * definition, so a route added later is known without editing this file.
 */
import { HttpApi } from "@effect/platform"

export interface Route {
  readonly method: string
  readonly pattern: RegExp
}

export type RouteMatch =
  | { readonly _tag: "Found" }
  | { readonly _tag: "NoRoute" }
  | { readonly _tag: "WrongMethod"; readonly allow: ReadonlyArray<string> }

const patternOf = (path: string) =>
  new RegExp(`^${path.split("/").map((s) => (s.startsWith(":") ? "[^/]+" : s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))).join("/")}$`)

/** The routes of `api`, with extra ones served beside it (the OpenAPI document). */
export const routesOf = (api: HttpApi.HttpApi.Any, extra: ReadonlyArray<{ method: string; path: string }> = []) => {
  const routes: Array<Route> = extra.map((r) => ({ method: r.method, pattern: patternOf(r.path) }))
  HttpApi.reflect(api as any, {
    onGroup: () => undefined,
    onEndpoint: ({ endpoint }) => {
      routes.push({ method: endpoint.method, pattern: patternOf(endpoint.path) })
    }
  })
  return routes
}

/** How `method path` meets the routes (HEAD is served wherever GET is). */
export const matchRoute = (routes: ReadonlyArray<Route>, method: string, path: string): RouteMatch => {
  const here = routes.filter((r) => r.pattern.test(path))
  if (here.length === 0) return { _tag: "NoRoute" }
  const wanted = method === "HEAD" ? "GET" : method
  if (here.some((r) => r.method === wanted)) return { _tag: "Found" }
  const allow = [...new Set(here.map((r) => r.method))]
  if (allow.includes("GET")) allow.push("HEAD")
  return { _tag: "WrongMethod", allow }
}
