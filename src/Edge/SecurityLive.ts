/**
 * The `ServiceKey` middleware: the pipeline has already authenticated the key (so revocation is
 * checked on every request); here the operation's declared scopes are enforced (403
 * `missing_scope`) and the principal is provided to handlers.
 */
import { HttpApiBuilder, HttpApiError, type HttpApiGroup, HttpRouter, type HttpServerResponse } from "@effect/platform"
import { Context, Effect, Layer } from "effect"

import { Api } from "../Api.js"
import { AuthenticationFailed, InvalidRequest, missingScope } from "../Kernel/Errors.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"
import { requestState } from "./UnitOfWork.js"

const scopeTable = () => {
  const table = new Map<string, ReadonlyArray<string>>()
  for (const group of Object.values(Api.groups) as unknown as Array<HttpApiGroup.HttpApiGroup.AnyWithProps>) {
    for (const endpoint of Object.values(group.endpoints)) {
      const scopes = Context.getOrElse(endpoint.annotations, RequiredScopes, () => undefined)
      if (scopes) table.set(`${endpoint.method} ${endpoint.path}`, scopes)
    }
  }
  return table
}

export const ServiceKeyLive = Layer.sync(ServiceKey, () => {
  const table = scopeTable()
  return ServiceKey.of({
    ServiceKey: () =>
      Effect.gen(function*() {
        const principal = (yield* requestState)?.principal
        if (!principal) {
          return yield* new AuthenticationFailed({ code: "missing_api_key", message: "A service key is required" })
        }
        const route = yield* HttpRouter.RouteContext
        const required = table.get(`${route.route.method} ${route.route.path}`)
        if (required === undefined) {
          return yield* Effect.dieMessage(`no scopes declared for ${route.route.method} ${route.route.path}`)
        }
        const missing = required.filter((s) => !(principal.scopes as ReadonlyArray<string>).includes(s))
        if (missing.length > 0) return yield* missingScope(missing)
        return principal
      })
  })
})

/**
 * Request decoding failures of the HttpApi (path, query, headers, body) become the D3 400
 * envelope, naming the first offending parameter.
 *
 * The router must let every path parameter reach that decoding: its default `maxParamLength` of
 * 100 turned an identifier of 101..128 chars (valid, D2) and one of 129+ (400, D2) into a 404
 * `route_not_found`. Routing is also made case-sensitive, like the pipeline's `/v1/` gate, so a
 * path the gate does not treat as `/v1` (e.g. `/V1/tenants`) cannot route to a `/v1` handler.
 */
const RouterConfigLive = HttpRouter.setRouterConfig({ maxParamLength: Number.MAX_SAFE_INTEGER, caseSensitive: true })

/** A decoding message quotes the value it refused: never more than this much of it (no echo of a huge input). */
const MAX_MESSAGE = 300
const cut = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text)

const codeOf = (tag: string | undefined) =>
  tag === "Missing" ? "parameter_missing" : tag === "Unexpected" ? "unknown_parameter" : "parameter_invalid"

const DecodeErrorsMiddleware = HttpApiBuilder.middleware((app) =>
  Effect.catchAll(app as unknown as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, never>, (e) => {
    if (!(e instanceof HttpApiError.HttpApiDecodeError)) return Effect.fail(e)
    const issue = e.issues[0]
    const param = issue?.path.map(String).join(".")
    const detail = issue?._tag === "Unexpected" ? "is not a field of this request" : issue?.message
    return Effect.fail(
      new InvalidRequest({
        code: codeOf(issue?._tag),
        message: cut(issue ? `${param ? param + ": " : ""}${detail}` : e.message),
        ...(param ? { param } : {})
      })
    )
  }) as unknown as typeof app
)

export const DecodeErrorsLive = Layer.merge(DecodeErrorsMiddleware, RouterConfigLive)
