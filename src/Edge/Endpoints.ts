/**
 * The HttpApi's endpoints compiled once into the request pipeline (issue 37, "one pipeline for
 * every route"). For each endpoint, at startup: its handler (recorded by `Kernel/HttpGroup`), its
 * path, query, header and payload decoders, its success encoder, its middlewares' implementations
 * and its required scopes. A request the pipeline has routed (src/Edge/Routes.ts, matched once) is
 * served by its endpoint's `serve` in the request's own fiber: no router, no middleware stack
 * around it, no per-request context merge. What the platform's `HttpApiBuilder` does per route
 * (decoding, the security middlewares, encoding the value into a response by its schema's status
 * and encoding) is done here the same way, so the answers are the same; a request that fails to
 * decode is the D3 400 envelope naming the first offending parameter.
 */
import {
  type HttpApi,
  HttpApiError,
  HttpApiSchema,
  HttpMethod,
  type HttpServerRequest,
  HttpServerResponse,
  Multipart,
  UrlParams
} from "@effect/platform"
import { Context, Effect, Option, ParseResult, Redacted, Schema, type SchemaAST } from "effect"

import { InvalidRequest, missingScope } from "../Kernel/Errors.js"
import type { Handled } from "../Kernel/HttpGroup.js"
import { provideOwn } from "../Kernel/OwnFiber.js"
import { CurrentPrincipal } from "../Kernel/Principal.js"
import { RequiredScopes } from "../Kernel/Security.js"

export interface Endpoint {
  readonly operation: string
  /** the endpoint's answer to `request`, whose path gave `params` (raw, as matched) */
  readonly serve: (
    request: HttpServerRequest.HttpServerRequest,
    params: Readonly<Record<string, string>>
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>
}

// ---------------------------------------------------------------------------------------------
// Decoding failures as the D3 400 envelope

/** A decoding message quotes the value it refused: never more than this much of it (no echo of a huge input). */
const MAX_MESSAGE = 300
const cut = (text: string) => (text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text)

const codeOf = (tag: string | undefined) =>
  tag === "Missing" ? "parameter_missing" : tag === "Unexpected" ? "unknown_parameter" : "parameter_invalid"

/** A request that does not decode (path, query, headers, body): 400 naming the first offending parameter. */
const invalidRequest = (error: ParseResult.ParseError) =>
  Effect.flatMap(Effect.flip(HttpApiError.HttpApiDecodeError.refailParseError(error)), (e) => {
    const issue = e.issues[0]
    const param = issue?.path.map(String).join(".")
    const detail = issue?._tag === "Unexpected" ? "is not a field of this request" : issue?.message
    return new InvalidRequest({
      code: codeOf(issue?._tag),
      message: cut(issue ? `${param ? param + ": " : ""}${detail}` : e.message),
      ...(param ? { param } : {})
    })
  })

// ---------------------------------------------------------------------------------------------
// Success values as responses (the platform's HttpApiBuilder, same statuses and encodings)

const responseSchema = Schema.declare(HttpServerResponse.isServerResponse)

const toResponse = (data: unknown, ast: SchemaAST.AST): Effect.Effect<HttpServerResponse.HttpServerResponse, ParseResult.ParseIssue> => {
  const status = HttpApiSchema.getStatusSuccessAST(ast)
  if (HttpApiSchema.isVoid(ast)) return Effect.succeed(HttpServerResponse.empty({ status }))
  const encoding = HttpApiSchema.getEncoding(ast)
  switch (encoding.kind) {
    case "Json":
      return Effect.mapError(
        HttpServerResponse.json(data, { status, contentType: encoding.contentType }),
        (error) => new ParseResult.Type(ast, error, "Could not encode to JSON")
      )
    case "Text":
      return Effect.succeed(HttpServerResponse.text(data as string, { status, contentType: encoding.contentType }))
    case "Uint8Array":
      return Effect.succeed(HttpServerResponse.uint8Array(data as Uint8Array, { status, contentType: encoding.contentType }))
    case "UrlParams":
      return Effect.succeed(HttpServerResponse.urlParams(data as UrlParams.Input, { status, contentType: encoding.contentType }))
  }
}

/** The endpoint's success schemas (one per status), each encoding its value into a response. */
const successEncoder = (schema: Schema.Schema.Any) => {
  const members = new Set<Schema.Schema.Any>()
  HttpApiSchema.deunionize(members, schema)
  const union = Schema.Union(
    ...Array.from(members, (member) =>
      Schema.transformOrFail(responseSchema, member, {
        decode: (value, _, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, value, "Encode only schema")),
        encode: (value, _, ast) => toResponse(value, ast.to)
      }))
  )
  return Schema.encode(union as unknown as Schema.Schema<unknown, HttpServerResponse.HttpServerResponse>)
}

// ---------------------------------------------------------------------------------------------
// Requests

/** A path parameter as the platform's router gives it: percent-decoded (kept raw if it cannot be). */
const decodedParam = (raw: string) => {
  if (!raw.includes("%")) return raw
  try {
    return decodeURIComponent(raw)
  } catch {
    return raw
  }
}

const decodedParams = (params: Readonly<Record<string, string>>) => {
  const out: Record<string, string> = {}
  for (const name in params) out[name] = decodedParam(params[name]!)
  return out
}

/** The query string as the platform reads it: a name given twice is an array. */
const searchParams = (url: string): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  const q = url.indexOf("?")
  if (q === -1) return out
  for (const [key, value] of new URLSearchParams(url.slice(q + 1))) {
    const entry = out[key]
    if (entry === undefined) out[key] = value
    else if (Array.isArray(entry)) entry.push(value)
    else out[key] = [entry, value]
  }
  return out
}

/** Whether the query parameter `key` is a single string to `ast` (the platform's rule, `HttpApiBuilder`). */
const isSingleStringType = (ast: SchemaAST.AST, key?: PropertyKey): boolean => {
  switch (ast._tag) {
    case "StringKeyword":
    case "Literal":
    case "TemplateLiteral":
    case "Enums":
      return true
    case "TypeLiteral": {
      if (key === undefined) return false
      const ps = ast.propertySignatures.find((ps) => ps.name === key)
      return ps !== undefined
        ? isSingleStringType(ps.type, key)
        : ast.indexSignatures.some((is) => Schema.is(Schema.make(is.parameter))(key) && isSingleStringType(is.type))
    }
    case "Union":
      return ast.types.some((type) => isSingleStringType(type, key))
    case "Suspend":
      return isSingleStringType(ast.f(), key)
    case "Refinement":
    case "Transformation":
      return isSingleStringType(ast.from, key)
  }
  return false
}

/** A query parameter the schema does not take as a single string is given as an array, even when it appears once. */
const normalizeUrlParams = (params: Record<string, string | Array<string>>, ast: SchemaAST.AST) => {
  const out: Record<string, string | Array<string>> = {}
  for (const key in params) {
    const value = params[key]!
    out[key] = Array.isArray(value) || isSingleStringType(ast, key) ? value : [value]
  }
  return out
}

/** The request's body as the platform reads it for a payload schema (a GET's payload is its query). */
const requestPayload = (
  request: HttpServerRequest.HttpServerRequest,
  query: () => Record<string, string | Array<string>>,
  multipartLimits: Option.Option<Multipart.withLimits.Options>
): Effect.Effect<unknown, never, any> => {
  if (!HttpMethod.hasBody(request.method)) return Effect.succeed(query())
  const contentType = request.headers["content-type"] ? request.headers["content-type"].toLowerCase().trim() : "application/json"
  if (contentType.includes("application/json")) return Effect.orDie(request.json)
  if (contentType.includes("multipart/form-data")) {
    return Effect.orDie(Option.match(multipartLimits, {
      onNone: () => request.multipart,
      onSome: (limits) => Multipart.withLimits(request.multipart, limits)
    }))
  }
  if (contentType.includes("x-www-form-urlencoded")) return Effect.map(Effect.orDie(request.urlParamsBody), UrlParams.toRecord)
  if (contentType.startsWith("text/")) return Effect.orDie(request.text)
  return Effect.map(Effect.orDie(request.arrayBuffer), (buffer) => new Uint8Array(buffer))
}

// ---------------------------------------------------------------------------------------------
// Middlewares

const BEARER = "Bearer ".length

/** A security scheme's credential, read from the request as the platform reads it. */
const credentialOf = (scheme: any, request: HttpServerRequest.HttpServerRequest) => {
  switch (scheme._tag) {
    case "Bearer":
      return Redacted.make((request.headers.authorization ?? "").slice(BEARER))
    case "ApiKey":
      if (scheme.in === "header") return Redacted.make(request.headers[String(scheme.key).toLowerCase()] ?? "")
      throw new Error(`security scheme ApiKey in ${scheme.in} is not supported by the pipeline`)
    default:
      throw new Error(`security scheme ${scheme._tag} is not supported by the pipeline`)
  }
}

type Wrap = (
  inner: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>,
  request: HttpServerRequest.HttpServerRequest
) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>

/** A middleware around the endpoint, with its implementation taken from `context` once. */
const middlewareOf = (tag: any, context: Context.Context<never>): Wrap => {
  const impl = Context.unsafeGet(context, tag) as any
  // What it provides (the key's principal) is set on the request's fiber, which serves only this
  // request (the server's, or its mutation's detached one): not provided and restored around the
  // endpoint, an acquire/use/release and a copy of the fiber's context per request.
  const provide = (inner: Effect.Effect<any, unknown>, value: unknown) =>
    tag.provides === undefined ? inner : provideOwn(Context.make(tag.provides, value))(inner)
  if (tag.security !== undefined) {
    const schemes = Object.entries(tag.security as Record<string, unknown>)
    if (schemes.length !== 1) throw new Error(`middleware ${tag.key}: one security scheme is supported, it has ${schemes.length}`)
    const [name, scheme] = schemes[0]!
    return (inner, request) =>
      Effect.flatMap(impl[name](credentialOf(scheme, request)) as Effect.Effect<unknown, unknown>, (value) => provide(inner, value))
  }
  return (inner) => Effect.flatMap(impl as Effect.Effect<unknown, unknown>, (value) => provide(inner, value))
}

/** The endpoint's declared scopes, checked against the principal its middleware provided (403 `missing_scope`). */
const scopesChecked = (required: ReadonlyArray<string> | undefined): Wrap =>
  required === undefined ? (inner) => inner : (inner) =>
    // the principal is provided by the ServiceKey middleware around this
    Effect.flatMap(CurrentPrincipal, (principal) => {
      const missing = required.filter((s) => !(principal.scopes as ReadonlyArray<string>).includes(s))
      return missing.length > 0 ? missingScope(missing) : inner
    }) as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>

// ---------------------------------------------------------------------------------------------

const compile = (
  api: HttpApi.HttpApi.AnyWithProps,
  groupIdentifier: string,
  handled: Handled,
  context: Context.Context<never>
): Endpoint => {
  const endpoint = handled.endpoint
  const group = api.groups[groupIdentifier]!
  const multipartStream = Option.exists(endpoint.payloadSchema, ({ ast }) => HttpApiSchema.getMultipartStream(ast) !== undefined)
  const multipartLimits = Option.flatMapNullable(
    endpoint.payloadSchema,
    ({ ast }) => HttpApiSchema.getMultipart(ast) || HttpApiSchema.getMultipartStream(ast)
  )
  const decodePath = Option.getOrUndefined(Option.map(endpoint.pathSchema, Schema.decodeUnknown))
  const decodePayload = handled.withFullRequest || multipartStream
    ? undefined
    : Option.getOrUndefined(Option.map(endpoint.payloadSchema, Schema.decodeUnknown))
  const decodeHeaders = Option.getOrUndefined(Option.map(endpoint.headersSchema, Schema.decodeUnknown))
  const urlParamsSchema = Option.getOrUndefined(endpoint.urlParamsSchema)
  const decodeUrlParams = urlParamsSchema === undefined ? undefined : Schema.decodeUnknown(urlParamsSchema)
  const encodeSuccess = successEncoder(endpoint.successSchema)
  const handler = handled.handler

  const core = (request: HttpServerRequest.HttpServerRequest, params: Readonly<Record<string, string>>) =>
    Effect.gen(function*() {
      let query: Record<string, string | Array<string>> | undefined
      const queryOf = () => (query ??= searchParams(request.url))
      const input: Record<string, unknown> = { request }
      if (decodePath !== undefined) input["path"] = yield* decodePath(decodedParams(params))
      if (decodePayload !== undefined) {
        input["payload"] = yield* Effect.flatMap(requestPayload(request, queryOf, multipartLimits), decodePayload)
      } else if (multipartStream) {
        input["payload"] = Option.match(multipartLimits, {
          onNone: () => request.multipartStream,
          onSome: (limits) => Multipart.withLimitsStream(request.multipartStream, limits)
        })
      }
      if (decodeHeaders !== undefined) input["headers"] = yield* decodeHeaders(request.headers)
      if (decodeUrlParams !== undefined) input["urlParams"] = yield* decodeUrlParams(normalizeUrlParams(queryOf(), urlParamsSchema!.ast))
      const response = yield* handler(input)
      return HttpServerResponse.isServerResponse(response) ? response : yield* encodeSuccess(response)
    }).pipe(Effect.catchIf(ParseResult.isParseError, invalidRequest))

  // The platform's order: the group's middlewares then the endpoint's (once each), each around the
  // ones before it, and the API's around them all; the scopes are checked within them all, before
  // anything is decoded.
  const own = new Map<string, unknown>()
  for (const tag of [...group.middlewares, ...endpoint.middlewares]) own.set(tag.key, tag)
  const wraps: Array<Wrap> = [scopesChecked(Context.getOrElse(endpoint.annotations, RequiredScopes, () => undefined))]
  for (const tag of [...own.values(), ...api.middlewares]) wraps.push(middlewareOf(tag, context))

  const serve = (request: HttpServerRequest.HttpServerRequest, params: Readonly<Record<string, string>>) => {
    let effect: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown> = core(request, params) as any
    for (const wrap of wraps) effect = wrap(effect, request)
    // The server runs a request uninterruptibly but for its handler, as the platform's router does:
    // a client that goes away interrupts the endpoint's work (unless it is declared uninterruptible),
    // and the pipeline around it runs on to answer 499 and count it.
    return handled.uninterruptible ? effect : Effect.interruptible(effect)
  }
  return { operation: endpoint.name, serve }
}

/** Every endpoint of `api` that has a handler, by operation (the endpoint's name). */
export const compileEndpoints = (
  api: HttpApi.HttpApi.Any,
  handlers: ReadonlyMap<string, ReadonlyArray<Handled>>,
  context: Context.Context<never>
): ReadonlyMap<string, Endpoint> => {
  const endpoints = new Map<string, Endpoint>()
  for (const [group, handled] of handlers) {
    for (const one of handled) endpoints.set(one.endpoint.name, compile(api as HttpApi.HttpApi.AnyWithProps, group, one, context))
  }
  for (const group of Object.values((api as HttpApi.HttpApi.AnyWithProps).groups)) {
    for (const name of Object.keys(group.endpoints)) {
      if (!endpoints.has(name)) throw new Error(`endpoint ${group.identifier}.${name} has no handler`)
    }
  }
  return endpoints
}
