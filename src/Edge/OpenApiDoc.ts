/**
 * Completes the generated OpenAPI 3.1 document with what the contract requires of every operation
 * (contract part 4, 9; D1): the operationId of the contract, `x-release-stage`/`x-visibility`, the
 * scopes as its `ServiceKey` security requirement, the documented error statuses (the D3 envelope),
 * and the headers every response carries. Scopes come from the same `RequiredScopes` annotation the
 * `ServiceKey` middleware enforces.
 */
import type { HttpApi, HttpApiGroup, OpenApi } from "@effect/platform"
import { Context } from "effect"

import { RequiredScopes } from "../Kernel/Security.js"

const ERROR_STATUSES: ReadonlyArray<[string, string, string]> = [
  ["400", "InvalidRequestError", "Invalid request"],
  ["401", "AuthenticationFailedError", "Authentication failed"],
  ["403", "PermissionDeniedError", "Permission denied"],
  ["404", "NotFoundError", "Not found"],
  ["409", "ConflictError", "Conflict"],
  ["410", "GoneError", "Gone"],
  ["429", "RateLimitedError", "Rate limited"],
  [
    "503",
    "UnavailableError",
    "Unavailable (e.g. `database_unavailable`: the database cannot be reached; retry after `Retry-After` seconds)"
  ]
]

const header = (description: string, schema: object = { type: "string" }) => ({ description, schema })
const COMMON_HEADERS = {
  "X-Request-Id": header("Support correlation id, 1 to 128 chars; equals the body's request_id", {
    type: "string",
    minLength: 1,
    maxLength: 128
  }),
  "Cache-Control": header("Always `no-store`")
}
const V1_HEADERS = {
  ...COMMON_HEADERS,
  "RateLimit-Policy": header("The cell's rate limit policy (IETF httpapi RateLimit headers draft)"),
  RateLimit: header("The cell's current rate limit state")
}

/** Request headers as clients write them (HttpApi schemas hold them lowercase). */
const HEADER_NAMES: Record<string, string> = {
  "idempotency-key": "Idempotency-Key",
  "x-actor-token": "X-Actor-Token",
  "prefer": "Prefer",
  "accept": "Accept",
  "last-event-id": "Last-Event-ID"
}
export type Spec = OpenApi.OpenAPISpec

/**
 * Points every `$ref` to `from` at `to` instead, then drops duplicate `anyOf`/`oneOf` alternatives
 * (collapsing a single remaining one).
 */
const replaceRef = (node: any, from: string, to: string): void => {
  if (node === null || typeof node !== "object") return
  if (node.$ref === from) node.$ref = to
  for (const value of Object.values(node)) replaceRef(value, from, to)
  for (const key of ["anyOf", "oneOf"]) {
    if (!Array.isArray(node[key])) continue
    const seen = new Set<string>()
    const kept = node[key].filter((s: any) => {
      const id = JSON.stringify(s)
      if (seen.has(id)) return false
      seen.add(id)
      return true
    })
    if (kept.length === 1 && Object.keys(node).length === 1) {
      delete node[key]
      Object.assign(node, kept[0])
    } else {
      node[key] = kept
    }
  }
}

export const describeOperations = (api: HttpApi.HttpApi.Any, spec: Spec): Spec => {
  const endpoints = new Map<string, { name: string; scopes: ReadonlyArray<string> | undefined }>()
  for (const group of Object.values((api as any).groups) as Array<HttpApiGroup.HttpApiGroup.AnyWithProps>) {
    for (const endpoint of Object.values(group.endpoints)) {
      const path = endpoint.path.replace(/:(\w+)/g, "{$1}")
      endpoints.set(`${endpoint.method.toLowerCase()} ${path}`, {
        name: endpoint.name,
        scopes: Context.getOrElse(endpoint.annotations, RequiredScopes, () => undefined)
      })
    }
  }
  const doc: any = structuredClone(spec)
  doc.info["x-release-stage"] = "proposed"
  doc.info["x-visibility"] = "public"
  doc.security = []
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    const isV1 = path.startsWith("/v1/")
    for (const [method, op] of Object.entries<any>(item)) {
      const endpoint = endpoints.get(`${method} ${path}`)
      if (!endpoint) continue
      op.operationId = endpoint.name
      op["x-release-stage"] = "proposed"
      op["x-visibility"] = "public"
      op.security = endpoint.scopes ? [{ ServiceKey: [...endpoint.scopes] }] : []
      if (endpoint.scopes) {
        op["x-scopes"] = [...endpoint.scopes]
        op.description = `${op.description ? op.description + "\n\n" : ""}Scopes: ${endpoint.scopes.map((s) => `\`${s}\``).join(", ")}.`
      }
      if (isV1) {
        for (const [status, schema, description] of ERROR_STATUSES) {
          op.responses[status] = {
            description,
            headers: status === "429" ? { ...V1_HEADERS, "Retry-After": header("Seconds to wait", { type: "integer" }) } : V1_HEADERS,
            content: { "application/json": { schema: { $ref: `#/components/schemas/${schema}` } } }
          }
        }
      }
      for (const [status, response] of Object.entries<any>(op.responses)) {
        response.headers = { ...(isV1 ? V1_HEADERS : COMMON_HEADERS), ...response.headers }
        if (status === "202") response.headers.Location = header("Path of the accepted resource to poll")
      }
      if (Array.isArray(op.parameters)) {
        for (const p of op.parameters) {
          if (p.in === "header" && HEADER_NAMES[p.name] !== undefined) p.name = HEADER_NAMES[p.name]
          // The schema is NumberFromString, whose encoded side documents a bare string (D6: integer 1..100).
          if (p.in === "query" && p.name === "limit") {
            p.schema = { type: "integer", minimum: 1, maximum: 100, default: 50, description: p.schema?.description }
          }
        }
      }
    }
  }
  // Decode failures are answered with the D3 envelope (DecodeErrorsLive), never HttpApiDecodeError:
  // drop the generated schema and point what referred to it (the generated 400 of operations
  // outside /v1, like /healthz) at the envelope instead, so no `$ref` dangles.
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete doc.components?.schemas?.[name]
  replaceRef(doc.paths, "#/components/schemas/HttpApiDecodeError", "#/components/schemas/InvalidRequestError")
  delete doc.components?.securitySchemes?.OperatorToken
  return doc
}
