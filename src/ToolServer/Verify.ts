/**
 * Verifying a signed tool invocation (D10): the customer's side of contract 5. A request is
 * accepted only when its Ed25519 token verifies against the platform's published key set and every
 * claim matches what this endpoint expects: issuer, the exact audience URL, a lifetime of at most
 * 60 s that has not run out, the `typ` header, tenant and environment, a well-formed actor, the
 * operation id, the digest of the raw body bytes and a cell generation no older than the minimum.
 *
 * A valid signature only says the platform sent the request on behalf of `actor`; what that actor
 * may do is still the handler's decision (the verified claims are handed to it).
 */
import { createHash, timingSafeEqual } from "node:crypto"

import { Clock, Effect, Schema } from "effect"
import { createRemoteJWKSet, errors, type JWTPayload, jwtVerify, type JWTVerifyGetKey, type RemoteJWKSetOptions } from "jose"

/** The `typ` header of an invocation token. */
export const TOKEN_TYPE = "tool-invocation+jwt"
/** The longest lifetime (`exp - iat`) a token may declare, in seconds. */
export const MAX_TOKEN_SECONDS = 60

export type RejectionCode =
  | "missing_token"
  | "invalid_token"
  | "wrong_issuer"
  | "wrong_audience"
  | "expired_token"
  | "invalid_lifetime"
  | "wrong_tenant"
  | "wrong_environment"
  | "invalid_actor"
  | "actor_forbidden"
  | "missing_operation_id"
  | "operation_id_mismatch"
  | "digest_mismatch"
  | "stale_cell_generation"
  | "jwks_unavailable"

/** Why an invocation was refused; `status` is the HTTP status to answer with (401 unless noted). */
export class InvocationRejected extends Schema.TaggedError<InvocationRejected>()("InvocationRejected", {
  code: Schema.String,
  message: Schema.String,
  status: Schema.Number
}) {}

const reject = (code: RejectionCode, message: string, status = 401) => Effect.fail(new InvocationRejected({ code, message, status }))

export interface Actor {
  readonly type: "user" | "service_actor" | "api_key"
  readonly id: string
}

/** The claims of a verified token, as signed. */
export interface InvocationClaims extends JWTPayload {
  readonly iss: string
  readonly aud: string
  readonly sub: string
  readonly iat: number
  readonly exp: number
  readonly jti: string
  readonly tenant_id: string
  readonly environment: string
  readonly actor: Actor
  readonly operation_id?: string
  readonly input_digest: string
  readonly cell_generation: number
  readonly run_id: string
  readonly tool_id: string
}

/** What a handler gets: who called, for which run and tool, and the operation id. */
export interface VerifiedInvocation {
  readonly claims: InvocationClaims
  readonly actor: Actor
  readonly tenantId: string
  readonly environment: string
  readonly runId: string
  readonly toolId: string
  readonly cellGeneration: number
  /** Present for every write (and for reads the platform chose to tag). */
  readonly operationId: string | undefined
}

/** Who a run acts for: a user (created with an actor token), a service actor, or the service key itself. */
const ACTOR_TYPES = new Set(["user", "service_actor", "api_key"])

export interface VerifierConfig {
  /** `{platform}/v1/tenants/{tenant}/environments/{env}/jwks.json` */
  readonly jwksUrl: string | URL
  /** The platform's configured issuer (`iss`). */
  readonly issuer: string
  readonly tenantId: string
  readonly environment: string
  /** Tokens from an older cell generation are refused; a function is read on every request. */
  readonly minCellGeneration?: number | (() => number)
  /**
   * When true, the minimum also rises to the highest generation accepted so far: once a newer cell
   * has called, a call from an older one is refused (fencing after a handoff).
   */
  readonly trackHighestGeneration?: boolean
  /** Allowed clock skew for `exp`/`iat`, in seconds (default 5). */
  readonly clockToleranceSeconds?: number
  /** Optional business check of the actor; `false` answers 403 `actor_forbidden`. */
  readonly authorizeActor?: (actor: Actor, claims: InvocationClaims) => Effect.Effect<boolean>
  /**
   * Options of jose's remote key set (timeouts, cache age; `cooldownDuration`, default 30 s, is
   * how soon an unknown `kid` may trigger a refetch after a key rotation).
   */
  readonly jwksOptions?: RemoteJWKSetOptions
  /** A key source other than the remote key set (tests, a pinned local set). */
  readonly keys?: JWTVerifyGetKey
}

/** One incoming request, before anything is trusted. */
export interface InvocationRequest {
  readonly method: string
  /** The exact URL this endpoint expects in `aud`. */
  readonly audience: string
  /** Header names in any case. */
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  /** The body exactly as received (empty for GET). */
  readonly rawBody: Uint8Array
  /** Writes: the token must name an operation id. */
  readonly requireOperationId?: boolean
  /** Reconciliation: the operation id the path names, which the token must carry. */
  readonly expectedOperationId?: string
}

export interface Verifier {
  readonly verifyInvocation: (request: InvocationRequest) => Effect.Effect<VerifiedInvocation, InvocationRejected>
  /** The minimum cell generation accepted right now. */
  readonly minCellGeneration: () => number
}

/** `sha-256=` + base64url (no padding) of the SHA-256 of `body`: the `input_digest` claim. */
export const inputDigest = (body: Uint8Array | string): string => `sha-256=${createHash("sha256").update(body).digest("base64url")}`

const header = (headers: InvocationRequest["headers"], name: string): string | undefined => {
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return typeof value === "string" ? value : value?.[0]
  }
  return undefined
}

const sameString = (a: string, b: string) => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

const nonEmpty = (value: unknown): value is string => typeof value === "string" && value.length > 0

/** Maps a jose failure to the answer; anything unexpected fetching the key set is a 503. */
const fromJose = (error: unknown): InvocationRejected => {
  const make = (code: RejectionCode, message: string, status = 401) => new InvocationRejected({ code, message, status })
  if (error instanceof errors.JWTExpired) return make("expired_token", "the token has expired")
  if (error instanceof errors.JWTClaimValidationFailed) {
    switch (error.claim) {
      case "iss":
        return make("wrong_issuer", "the token was not issued by the configured issuer")
      case "aud":
        return make("wrong_audience", "the token is not for this URL")
      case "typ":
        return make("invalid_token", `the token's typ header must be ${TOKEN_TYPE}`)
      case "iat":
        return make("invalid_token", "the token is issued in the future")
      default:
        return make("invalid_token", `the token's ${error.claim} claim is missing or invalid`)
    }
  }
  if (error instanceof errors.JWKSNoMatchingKey) return make("invalid_token", "the token's key is not in the published key set")
  if (error instanceof errors.JWKSTimeout) return make("jwks_unavailable", "the published key set could not be fetched", 503)
  if (error instanceof errors.JOSEAlgNotAllowed) return make("invalid_token", "the token must be signed with EdDSA")
  if (error instanceof errors.JWSSignatureVerificationFailed) return make("invalid_token", "the token's signature is invalid")
  if (
    error instanceof errors.JWTInvalid || error instanceof errors.JWSInvalid || error instanceof errors.JOSENotSupported ||
    error instanceof errors.JWKInvalid
  ) {
    return make("invalid_token", "the token is malformed")
  }
  return make("jwks_unavailable", "the published key set could not be fetched", 503)
}

/** A verifier for one tenant/environment. The remote key set is fetched lazily and cached (jose). */
export const makeVerifier = (config: VerifierConfig): Verifier => {
  const keys = config.keys ?? createRemoteJWKSet(new URL(config.jwksUrl), config.jwksOptions)
  const tolerance = config.clockToleranceSeconds ?? 5
  let highestSeen = 0
  const minCellGeneration = () => {
    const configured = typeof config.minCellGeneration === "function"
      ? config.minCellGeneration()
      : config.minCellGeneration ?? 0
    return config.trackHighestGeneration ? Math.max(configured, highestSeen) : configured
  }

  const verifyInvocation = (request: InvocationRequest) =>
    Effect.gen(function*() {
      const authorization = header(request.headers, "authorization")
      const match = authorization?.match(/^Bearer\s+(\S+)\s*$/i)
      if (!match) return yield* reject("missing_token", "an Authorization: Bearer token is required")
      const now = yield* Clock.currentTimeMillis
      const { payload } = yield* Effect.tryPromise({
        try: () =>
          jwtVerify(match[1]!, keys, {
            algorithms: ["EdDSA"],
            typ: TOKEN_TYPE,
            issuer: config.issuer,
            audience: request.audience,
            maxTokenAge: MAX_TOKEN_SECONDS,
            clockTolerance: tolerance,
            currentDate: new Date(now),
            requiredClaims: ["iss", "aud", "sub", "iat", "exp", "jti"]
          }),
        catch: fromJose
      })
      const claims = payload as Partial<InvocationClaims> & JWTPayload

      if (claims.aud !== request.audience) return yield* reject("wrong_audience", "the token's aud must be exactly this URL")
      if (claims.exp! - claims.iat! > MAX_TOKEN_SECONDS) {
        return yield* reject("invalid_lifetime", `a token may live at most ${MAX_TOKEN_SECONDS} seconds`)
      }
      if (claims.tenant_id !== config.tenantId) return yield* reject("wrong_tenant", "the token is for another tenant")
      if (claims.environment !== config.environment) {
        return yield* reject("wrong_environment", "the token is for another environment")
      }
      const actor = claims.actor
      if (
        typeof actor !== "object" || actor === null || !ACTOR_TYPES.has(actor.type) ||
        !nonEmpty(actor.id) || claims.sub !== actor.id
      ) {
        return yield* reject("invalid_actor", "the token's actor must be {type: user|service_actor|api_key, id} with id = sub")
      }
      if (!nonEmpty(claims.jti) || !nonEmpty(claims.run_id) || !nonEmpty(claims.tool_id)) {
        return yield* reject("invalid_token", "the token must carry jti, run_id and tool_id")
      }

      const operationId = claims.operation_id
      if (operationId !== undefined && !nonEmpty(operationId)) {
        return yield* reject("invalid_token", "the token's operation_id must be a non-empty string")
      }
      const headerOperationId = header(request.headers, "x-operation-id")
      if ((request.requireOperationId || request.expectedOperationId !== undefined) && operationId === undefined) {
        return yield* reject("missing_operation_id", "this operation requires an operation_id claim")
      }
      if (headerOperationId !== undefined && headerOperationId !== operationId) {
        return yield* reject("operation_id_mismatch", "X-Operation-Id differs from the token's operation_id")
      }
      if (request.expectedOperationId !== undefined && request.expectedOperationId !== operationId) {
        return yield* reject("operation_id_mismatch", "the token's operation_id differs from the one in the path")
      }

      if (typeof claims.input_digest !== "string" || !sameString(claims.input_digest, inputDigest(request.rawBody))) {
        return yield* reject("digest_mismatch", "the body is not the one the token was signed for")
      }

      const generation = claims.cell_generation
      if (typeof generation !== "number" || !Number.isSafeInteger(generation) || generation < 0) {
        return yield* reject("invalid_token", "the token's cell_generation must be a non-negative integer")
      }
      if (generation < minCellGeneration()) {
        return yield* reject("stale_cell_generation", "the token comes from an older cell generation")
      }

      const verified = claims as InvocationClaims
      if (config.authorizeActor && !(yield* config.authorizeActor(actor, verified))) {
        return yield* reject("actor_forbidden", "this actor may not call this operation", 403)
      }
      if (generation > highestSeen) highestSeen = generation
      return {
        claims: verified,
        actor: { type: actor.type, id: actor.id },
        tenantId: verified.tenant_id,
        environment: verified.environment,
        runId: verified.run_id,
        toolId: verified.tool_id,
        cellGeneration: generation,
        operationId
      } satisfies VerifiedInvocation
    }).pipe(Effect.withSpan("ToolServer.verifyInvocation"))

  return { verifyInvocation, minCellGeneration }
}
