/**
 * The D3 error model. Handlers fail with these tagged errors; each has its HTTP status and its
 * envelope `type`. `ApiErrorSchema(E)` is what the HttpApi declares: its encoded side is exactly the
 * documented envelope `{error:{type,code,message,param?}, request_id}`, with `request_id` taken from
 * the current request, so the body always equals the `X-Request-Id` header.
 */
import { HttpApiSchema } from "@effect/platform"
import { Context, Effect, ParseResult, Schema } from "effect"

import { requestId } from "./RequestId.js"

const fields = {
  code: Schema.String,
  message: Schema.String,
  param: Schema.optional(Schema.String)
}

export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", fields) {
  static readonly status = 400
  static readonly type = "invalid_request"
}
export class AuthenticationFailed extends Schema.TaggedError<AuthenticationFailed>()("AuthenticationFailed", fields) {
  static readonly status = 401
  static readonly type = "authentication_error"
}
export class PermissionDenied extends Schema.TaggedError<PermissionDenied>()("PermissionDenied", fields) {
  static readonly status = 403
  static readonly type = "permission_error"
}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fields) {
  static readonly status = 404
  static readonly type = "not_found"
}
/** A path that exists, with a method it does not have (the response carries `Allow`). */
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", fields) {
  static readonly status = 405
  static readonly type = "invalid_request"
}
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", fields) {
  static readonly status = 409
  static readonly type = "conflict"
}
export class Gone extends Schema.TaggedError<Gone>()("Gone", fields) {
  static readonly status = 410
  static readonly type = "gone"
}
/** A `Range` no byte of the resource satisfies (the response's `Content-Range` gives the size). */
export class RangeNotSatisfiable extends Schema.TaggedError<RangeNotSatisfiable>()("RangeNotSatisfiable", fields) {
  static readonly status = 416
  static readonly type = "invalid_request"
}
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", fields) {
  static readonly status = 429
  static readonly type = "rate_limited"
}
export class Unavailable extends Schema.TaggedError<Unavailable>()("Unavailable", fields) {
  static readonly status = 503
  static readonly type = "unavailable"
}
/** Not a domain error: the body of a 500 produced from a defect. */
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {
  static readonly status = 500
  static readonly type = "api_error"
}

export type ApiError =
  | InvalidRequest
  | AuthenticationFailed
  | PermissionDenied
  | NotFound
  | MethodNotAllowed
  | Conflict
  | Gone
  | RangeNotSatisfiable
  | RateLimited
  | Unavailable
  | InternalError

type ErrorClass<E> =
  & Schema.Schema<E, any>
  & { readonly status: number; readonly type: string }
  & (new(
    args: { code: string; message: string; param?: string }
  ) => E)

const envelopeOf = (type: string) =>
  Schema.Struct({
    error: Schema.Struct({
      type: Schema.Literal(type),
      code: Schema.String,
      message: Schema.String,
      param: Schema.optional(Schema.String)
    }),
    request_id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128))
  })

export const toEnvelope = (e: { code: string; message: string; param?: string | undefined }, type: string, id: string) => ({
  error: {
    type,
    code: e.code,
    message: e.message,
    ...(e.param !== undefined ? { param: e.param } : {})
  },
  request_id: id
})

/** The HttpApi schema of one error class: the D3 envelope on the wire, the tagged error in code. */
export const ApiErrorSchema = <E extends { code: string; message: string; param?: string | undefined }>(
  Class: ErrorClass<E>,
  description: string
) =>
  Schema.transformOrFail(envelopeOf(Class.type), Schema.typeSchema(Class), {
    strict: false,
    decode: (body) =>
      ParseResult.succeed(
        new Class({
          code: body.error.code,
          message: body.error.message,
          ...(body.error.param !== undefined ? { param: body.error.param } : {})
        })
      ),
    encode: (e) => Effect.map(requestId, (id) => toEnvelope(e, Class.type, id))
  }).annotations({
    ...HttpApiSchema.annotations({ status: Class.status }),
    identifier: `${(Class as any).identifier ?? Class.type}Error`,
    title: `Error (${Class.status})`,
    description
  })

export const InvalidRequestError = ApiErrorSchema(
  InvalidRequest,
  "Malformed request, failed validation, missing Idempotency-Key, bad cursor, unknown environment name"
)
export const AuthenticationError = ApiErrorSchema(AuthenticationFailed, "Missing, unknown, revoked or expired service key")
export const PermissionError = ApiErrorSchema(
  PermissionDenied,
  "The key lacks a scope the operation needs, or the action is outside its management ceiling"
)
export const NotFoundError = ApiErrorSchema(
  NotFound,
  "No such resource in this tenant and environment (resources of others are always 404)"
)
export const ConflictError = ApiErrorSchema(Conflict, "Idempotency-Key conflict, duplicate resource, or a state that forbids the action")
export const GoneError = ApiErrorSchema(Gone, "The resource was deleted and its identifier is tombstoned")
export const RangeNotSatisfiableError = ApiErrorSchema(
  RangeNotSatisfiable,
  "The `Range` starts past the end of the file (`code: range_not_satisfiable`); `Content-Range: bytes */<size>` gives the size"
)
export const RateLimitedError = ApiErrorSchema(RateLimited, "Rate limit of the cell exceeded; see Retry-After")
export const UnavailableError = ApiErrorSchema(Unavailable, "Temporarily unavailable (e.g. environment not ready); safe to retry")

/** The status code list every operation documents (contract part 4, 7). */
export const StandardErrors = [
  InvalidRequestError,
  AuthenticationError,
  PermissionError,
  NotFoundError,
  ConflictError,
  GoneError,
  RateLimitedError,
  UnavailableError
] as const

export const errorClassOf = (e: ApiError): { status: number; type: string } => e.constructor as any

/**
 * A 400 an operation gives to a request its schemas admit: a rule across fields, on the state of
 * other resources, or that no schema can state (a destination's DNS answer, a JSON Schema's
 * validity). `param` is the field the error names (`N` stands for an index); `inSchema` marks a rule
 * the schema does state, listed for its own error code (e.g. `accept_event_stream_required`).
 */
export interface Refusal {
  readonly code: string
  readonly param?: string
  readonly when: string
  readonly inSchema?: true
}

/**
 * An endpoint's refusals (400) beyond those of its shape (decoding, idempotency, body hygiene, list
 * cursors). The OpenAPI document lists them on the operation's 400 response (`x-error-codes`,
 * `x-error-rules`) and in its description (src/Edge/OpenApiDoc.ts).
 */
export class Refusals extends Context.Tag("Refusals")<Refusals, ReadonlyArray<Refusal>>() {}

// Small constructors so call sites read like the contract.
export const notFound = (what: string, param?: string) =>
  new NotFound({ code: "resource_missing", message: `No such ${what}`, ...(param ? { param } : {}) })
export const invalid = (code: string, message: string, param?: string) => new InvalidRequest({ code, message, ...(param ? { param } : {}) })
export const conflict = (code: string, message: string) => new Conflict({ code, message })
export const forbidden = (code: string, message: string) => new PermissionDenied({ code, message })
/** 403 `missing_scope`, naming the scopes the key lacks. */
export const missingScope = (missing: ReadonlyArray<string>) =>
  new PermissionDenied({ code: "missing_scope", message: `This key lacks the scope(s) this operation needs: ${missing.join(", ")}` })
