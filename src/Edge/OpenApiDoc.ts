/**
 * Completes the generated OpenAPI 3.1 document with what the contract requires of every operation
 * (contract part 4, 9; D1): the operationId of the contract, `x-release-stage`/`x-visibility`, the
 * scopes as its `ServiceKey` security requirement, the documented error statuses (the D3 envelope),
 * and the headers every response carries. Scopes come from the same `RequiredScopes` annotation the
 * `ServiceKey` middleware enforces. Effect Schema's generated titles and descriptions of
 * refinements (`maxLength(128)`, "a string at most 128 character(s) long") are dropped, and the
 * served document names `PUBLIC_BASE_URL` as its server (`OpenApiDocLive`).
 *
 * Every `/v1` operation's 400 lists the error codes it can carry (`x-error-codes`) and the rules a
 * request its schemas admit can still break (`x-error-rules`: `{code, param?, when}`, `N` standing
 * for an index in `param`): those of its shape (list cursors, body hygiene) and the endpoint's own
 * `Refusals` annotation, which is also stated in the operation's description. A union annotated
 * with a `discriminator` becomes a `oneOf` with the discriminator's mapping.
 */
import { HttpApi, HttpApiBuilder, type HttpApiGroup, HttpServerResponse, OpenApi } from "@effect/platform"
import { Context, Effect, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { type Refusal, Refusals } from "../Kernel/Errors.js"
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
    "Unavailable (e.g. `database_unavailable`: the database cannot be reached; `cell_unavailable`: the environment's cell is moving to another node; retry after `Retry-After` seconds)"
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

const code = (c: string) => `\`${c}\``

/**
 * The 400s of an operation: the codes of its shape (the pipeline's and decoding's, D3, D5, D6, D19)
 * and its own refusals; the rules a request its schemas admit can break; the response's prose.
 */
const invalidRequest = (method: string, op: any, own: ReadonlyArray<Refusal>) => {
  const parameters: Array<any> = Array.isArray(op.parameters) ? op.parameters : []
  const mutation = ["post", "put", "patch", "delete"].includes(method)
  const body = op.requestBody !== undefined
  const list = parameters.some((p) => p.in === "query" && p.name === "cursor")
  const outside: Array<[string, string]> = [
    ["parameter_invalid", "a parameter or body field outside its schema"],
    ...(body
      ? [
        ["parameter_missing", "a required body field missing"] as [string, string],
        ["unknown_parameter", "a body field its schema does not name"] as [string, string]
      ]
      : []),
    ["invalid_request", "a control character or a malformed percent-encoding in the URL"],
    ...(mutation
      ? [
        ["idempotency_key_required", "no `Idempotency-Key`"] as [string, string],
        ["idempotency_key_invalid", "an `Idempotency-Key` outside 1 to 255 characters of 0x21-0x7E"] as [string, string],
        ["unsupported_content_type", "a body that is not `application/json` in UTF-8"] as [string, string],
        ["invalid_body", "a body that is not JSON"] as [string, string]
      ]
      : [])
  ]
  const shape: Array<Refusal> = [
    ...(list
      ? [{ code: "invalid_cursor", param: "cursor", when: "`cursor` is not a `next_cursor` of this list (empty: the first page)" }]
      : []),
    ...(body
      ? [
        { code: "body_too_large", when: "the body is larger than the request body limit (1 MiB by default)" },
        {
          code: "invalid_request",
          when: "a string or key anywhere in the body (free-form objects included) holds U+0000, a lone surrogate or a " +
            "control character other than tab, LF and CR, or the body nests deeper than 64 levels"
        }
      ]
      : [])
  ]
  const rules = [...shape, ...own.filter((r) => !r.inSchema)].map((r) => ({
    code: r.code,
    ...(r.param !== undefined ? { param: r.param } : {}),
    when: r.when
  }))
  const codes = [...new Set([...outside.map(([c]) => c), ...shape.map((r) => r.code), ...own.map((r) => r.code)])]
  const description = "Invalid request: `error.code` is one of `x-error-codes`, and `error.param` names the parameter " +
    "or body field at fault (`a.N.b`). A request outside this operation's schemas: " +
    [...outside, ...own.filter((r) => r.inSchema).map((r): [string, string] => [r.code, r.when])]
      .map(([c, when]) => `${code(c)} (${when})`).join(", ") +
    ". A request within them, only for the rules of `x-error-rules`" +
    (own.some((r) => !r.inSchema) ? " (the operation's own are in its description)" : "") + ": " +
    (rules.length === 0 ? "none" : rules.map((r) => code(r.code)).filter((c, i, all) => all.indexOf(c) === i).join(", ")) + "."
  return { codes, rules, description }
}

/** An operation's own refusals, as the lists its description ends with. */
const refusalsProse = (own: ReadonlyArray<Refusal>) => {
  const line = (r: Refusal) => `- ${r.when} (${code(r.code)}${r.param !== undefined ? `, \`param\` ${code(r.param)}` : ""})`
  const beyond = own.filter((r) => !r.inSchema)
  const stated = own.filter((r) => r.inSchema)
  return [
    ...(beyond.length > 0 ? [`Refused with 400 although its schemas admit the request, when:\n${beyond.map(line).join("\n")}`] : []),
    ...(stated.length > 0
      ? [`Refused with 400 and a code of its own (its schemas state the rule), when:\n${stated.map(line).join("\n")}`]
      : [])
  ].join("\n\n")
}

/**
 * A union annotated with a `discriminator` (Effect generates `anyOf`) as a `oneOf` whose mapping
 * names each alternative's value of the discriminating property.
 */
const discriminated = (doc: any) => {
  const resolve = (s: any) =>
    typeof s?.$ref === "string" && s.$ref.startsWith("#/components/schemas/")
      ? doc.components?.schemas?.[s.$ref.slice("#/components/schemas/".length)]
      : s
  const visit = (node: any): void => {
    if (node === null || typeof node !== "object") return
    if (Array.isArray(node)) return node.forEach(visit)
    const name = node.discriminator?.propertyName
    if (typeof name === "string" && Array.isArray(node.anyOf)) {
      node.oneOf = node.anyOf
      delete node.anyOf
      const mapping: Record<string, string> = {}
      for (const alternative of node.oneOf) {
        const values = resolve(alternative)?.properties?.[name]?.enum
        if (typeof alternative.$ref === "string" && Array.isArray(values) && values.length === 1) {
          mapping[values[0]] = alternative.$ref
        }
      }
      if (Object.keys(mapping).length === node.oneOf.length) node.discriminator = { propertyName: name, mapping }
    }
    for (const value of Object.values(node)) visit(value)
  }
  visit(doc)
}

export const describeOperations = (api: HttpApi.HttpApi.Any, spec: Spec): Spec => {
  const endpoints = new Map<
    string,
    { name: string; scopes: ReadonlyArray<string> | undefined; refusals: ReadonlyArray<Refusal> }
  >()
  for (const group of Object.values((api as any).groups) as Array<HttpApiGroup.HttpApiGroup.AnyWithProps>) {
    for (const endpoint of Object.values(group.endpoints)) {
      const path = endpoint.path.replace(/:(\w+)/g, "{$1}")
      endpoints.set(`${endpoint.method.toLowerCase()} ${path}`, {
        name: endpoint.name,
        scopes: Context.getOrElse(endpoint.annotations, RequiredScopes, () => undefined),
        refusals: Context.getOrElse(endpoint.annotations, Refusals, () => [])
      })
    }
  }
  const doc: any = structuredClone(spec)
  doc.info["x-release-stage"] = "proposed"
  doc.info["x-visibility"] = "public"
  // Not open source (package.json is private, names no license): an SPDX reference of our own
  // (`LicenseRef-`), since OpenAPI 3.1 asks for an `identifier` or a `url` beside the name.
  doc.info.license = { name: "Proprietary", identifier: "LicenseRef-Proprietary" }
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
      if (isV1 && endpoint.refusals.length > 0) {
        op.description = `${op.description ? op.description + "\n\n" : ""}${refusalsProse(endpoint.refusals)}`
      }
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
        const { codes, description, rules } = invalidRequest(method, op, endpoint.refusals)
        op.responses["400"].description = description
        op.responses["400"]["x-error-codes"] = codes
        op.responses["400"]["x-error-rules"] = rules
      }
      for (const [status, response] of Object.entries<any>(op.responses)) {
        response.headers = { ...(isV1 ? V1_HEADERS : COMMON_HEADERS), ...response.headers }
        if (status === "202") response.headers.Location = header("Path of the accepted resource to poll")
      }
      if (Array.isArray(op.parameters)) {
        for (const p of op.parameters) {
          if (p.in === "header" && HEADER_NAMES[p.name] !== undefined) p.name = HEADER_NAMES[p.name]
          // The pipeline's rule (Idempotency `validKey`, D5), stated where the schema only has the lengths.
          if (p.in === "header" && p.name === "Idempotency-Key") p.schema = { ...p.schema, pattern: "^[\\x21-\\x7E]+$" }
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
  stripGenerated(doc)
  discriminated(doc)
  // Relative to where the document is served; the served document names PUBLIC_BASE_URL instead.
  if (!doc.servers?.length) doc.servers = [{ url: "/", description: "This service" }]
  return doc
}

/**
 * The titles and descriptions Effect Schema's filters give refinements by default (`Schema.maxLength`,
 * `Schema.pattern`, `Schema.int`, ...; effect/Schema.ts), which JSONSchema generation copies into every
 * refined schema. A description we wrote replaces the default on the same schema, so it never matches.
 */
const GENERATED_TITLE = new RegExp(
  "^(?:(?:maxLength|minLength|length|startsWith|endsWith|includes|greaterThan|greaterThanOrEqualTo|lessThan" +
    "|lessThanOrEqualTo|between|multipleOf|minItems|maxItems|itemsCount)\\(.*\\)" +
    "|trimmed|lowercased|uppercased|capitalized|uncapitalized|nonEmptyString|finite|int|nonNaN|positive|negative" +
    "|nonPositive|nonNegative)$"
)
const GENERATED_DESCRIPTION = new RegExp(
  "^(?:a string (?:at most|at least) \\d+ character\\(s\\)(?: and at most \\d+ character\\(s\\))? long" +
    "|a string (?:matching the pattern|starting with|ending with|including) .*" +
    "|an? (?:lowercase|uppercase|capitalized|uncapitalized|non empty) string" +
    "|a string with no leading or trailing whitespace" +
    "|an array of (?:at least|at most|exactly) \\d+ item\\(s\\)" +
    "|a finite number|an integer|a number excluding NaN|a (?:positive|negative|non-negative|non-positive) number" +
    "|a number (?:greater than|less than|between|divisible by) .*)$",
  "s"
)

/**
 * Drops generated titles and descriptions everywhere (schemas, and parameters, which copy their
 * schema's description), and the `$id` and title Effect gives `Schema.Unknown` (`/schemas/unknown`,
 * "unknown"): a relative `$id` would change the base URI of what it contains.
 */
const stripGenerated = (node: any): void => {
  if (node === null || typeof node !== "object") return
  if (Array.isArray(node)) return node.forEach(stripGenerated)
  if (typeof node.title === "string" && GENERATED_TITLE.test(node.title)) delete node.title
  if (typeof node.description === "string" && GENERATED_DESCRIPTION.test(node.description)) delete node.description
  if (typeof node.$id === "string" && node.$id.startsWith("/schemas/")) {
    if (node.title === node.$id.slice("/schemas/".length)) delete node.title
    delete node.$id
  }
  for (const value of Object.values(node)) stripGenerated(value)
}

/**
 * `GET /v1/openapi.json`: the document of the one HttpApi, as `HttpApiBuilder.middlewareOpenApi`
 * serves it, with `servers` naming `PUBLIC_BASE_URL` when it is set.
 */
export const OpenApiDocLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const { api } = yield* HttpApi.Api
    const config = yield* AppConfig
    const generated = OpenApi.fromApi(api)
    const spec = Option.match(config.publicBaseUrl, {
      onNone: () => generated,
      onSome: (url) => ({ ...generated, servers: [{ url: url.replace(/\/+$/, "") || "/", description: "This service" }] })
    })
    const response = yield* Effect.orDie(HttpServerResponse.json(spec))
    yield* router.get("/v1/openapi.json", Effect.succeed(response))
  })
)
