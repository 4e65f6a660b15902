/**
 * Actor sessions (D9, contract 5 rules 4-5): a service key cannot impersonate a user. A user's
 * request carries, besides the key, an actor token made from an assertion the tenant's identity
 * provider signed (`sub` = the user's `external_id`); the provider's issuer, audience and keys are
 * environment settings (src/EnvironmentSettings.ts). Tokens live at most 5 minutes, are stored as a hash,
 * work only with the key that made them, and die with the user, the key or the environment. An
 * assertion (D19) makes one session (its `jti`, once per environment and issuer) and only while
 * younger than 5 minutes (its `iat`, with 30 s of clock tolerance either way).
 */
import { createHash, randomBytes } from "node:crypto"

import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { createLocalJWKSet, createRemoteJWKSet, customFetch, type JSONWebKeySet, jwtVerify, type JWTVerifyGetKey } from "jose"
import { type Dispatcher, fetch as undiciFetch } from "undici"

import { ActorSessionsRepo } from "./ActorSessions/Repo.js"
import { dieOnSqlError } from "./Database/Defects.js"
import type { IdentityProvider } from "./Domain/EnvironmentSettings.js"
import { EnvironmentSettings } from "./EnvironmentSettings.js"
import { conflict, forbidden, notFound } from "./Kernel/Errors.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { Principal } from "./Kernel/Principal.js"
import { sharedBy, Shares } from "./Kernel/Shares.js"
import { actingUser } from "./Kernel/UnitOfWork.js"
import { Destinations } from "./Outbound/Destinations.js"
import { PlatformRepo } from "./Platform.js"

/** Contract part 8: an actor request token lives at most 5 minutes. */
export const ACTOR_TOKEN_SECONDS = 300

/** D19: an assertion is accepted only while younger than this (its `iat`), and only once (its `jti`). */
export const ASSERTION_MAX_AGE_SECONDS = 300
/** Clock skew allowed between the identity provider and us, on `iat` (either way), `exp` and `nbf`. */
export const ASSERTION_CLOCK_TOLERANCE_SECONDS = 30
/** D20: a remote JSON Web Key Set is read up to this many bytes; a larger one is refused unread. */
export const JWKS_MAX_BYTES = 64 * 1024

/**
 * jose's fetch of a remote key set, through the destination guard, reading at most JWKS_MAX_BYTES
 * of the body (a declared larger length is refused before reading): a provider's URL cannot make
 * the service buffer an unbounded body.
 */
const boundedJwksFetch = (dispatcher: Dispatcher) => async (url: string, options: RequestInit): Promise<Response> => {
  const response = await undiciFetch(url, { ...(options as any), dispatcher })
  const tooLarge = () =>
    Object.assign(new Error(`the JSON Web Key Set is larger than ${JWKS_MAX_BYTES} bytes`), { code: "ERR_JWKS_TOO_LARGE" })
  if (Number(response.headers.get("content-length") ?? 0) > JWKS_MAX_BYTES) {
    await response.body?.cancel()
    throw tooLarge()
  }
  const chunks: Array<Uint8Array> = []
  let bytes = 0
  if (response.body !== null) {
    const reader = response.body.getReader()
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      bytes += read.value.byteLength
      if (bytes > JWKS_MAX_BYTES) {
        await reader.cancel()
        throw tooLarge()
      }
      chunks.push(read.value)
    }
  }
  return new Response(Buffer.concat(chunks), { status: response.status, headers: response.headers as any })
}

/** Remote key sets kept (by URL) with their cache, across tenants. */
const REMOTE_SETS_KEPT = 1_000

/** Used assertions past their expiry deleted at most per session made. */
const SWEEP_LIMIT = 100

const hashToken = (token: string) => createHash("sha256").update(token).digest("hex")

export interface Actor {
  readonly type: "user"
  readonly id: string
}

export class ActorSessions extends Effect.Service<ActorSessions>()("ActorSessions", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* ActorSessionsRepo
    const platform = yield* PlatformRepo
    const settings = yield* EnvironmentSettings
    const destinations = yield* Destinations
    // (issue 36) reading a remote key set waits for the environment's share of the node's calls out
    const callOut = sharedBy(yield* Shares, "outbound")
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    const remoteSets = new Map<string, JWTVerifyGetKey>()
    const jwksFetch = boundedJwksFetch(destinations.dispatcher)

    const keySetOf = (idp: IdentityProvider): JWTVerifyGetKey => {
      if (idp.jwks !== undefined) return createLocalJWKSet(idp.jwks as JSONWebKeySet)
      let set = remoteSets.get(idp.jwks_url!)
      if (set === undefined) {
        set = createRemoteJWKSet(new URL(idp.jwks_url!), { [customFetch]: jwksFetch as any })
        // at most REMOTE_SETS_KEPT key sets (each with its cache) across tenants: the oldest goes first
        if (remoteSets.size >= REMOTE_SETS_KEPT) remoteSets.delete(remoteSets.keys().next().value!)
        remoteSets.set(idp.jwks_url!, set)
      }
      return set
    }

    /** `POST P/actor-sessions`: a 5-minute actor token for the user the assertion names. */
    const createSession = (p: Principal, body: { user_id: string; assertion: string }) =>
      Effect.gen(function*() {
        const idp = yield* settings.identityProvider(p)
        if (!idp) {
          return yield* conflict(
            "identity_provider_not_configured",
            "This environment has no identity provider; set one with PATCH settings"
          )
        }
        const user = yield* platform.user(p.tenantId, p.environment, body.user_id)
        if (!user || user.status !== "active") return yield* notFound("user", "user_id")
        const at = yield* now
        const verified = yield* Effect.tryPromise({
          try: () =>
            jwtVerify(body.assertion, keySetOf(idp), {
              issuer: idp.issuer,
              audience: idp.audience,
              currentDate: at,
              requiredClaims: ["sub", "exp", "iat", "jti"],
              // an `iat` older than this, or later than now (each beyond the tolerance), is refused
              maxTokenAge: ASSERTION_MAX_AGE_SECONDS,
              clockTolerance: ASSERTION_CLOCK_TOLERANCE_SECONDS
            }),
          catch: (e) => e
        }).pipe(
          (verify) => idp.jwks_url === undefined ? verify : callOut(verify),
          Effect.mapError((e: any) =>
            forbidden("invalid_assertion", `The assertion was not accepted: ${e?.code ?? "invalid"}${e?.message ? ` (${e.message})` : ""}`)
          )
        )
        const { exp, iat, jti, sub } = verified.payload
        if (typeof jti !== "string" || jti.length === 0 || jti.length > 255) {
          return yield* forbidden("invalid_assertion", "The assertion's jti must be a string of 1 to 255 characters")
        }
        if (sub !== user.external_id) {
          return yield* forbidden("invalid_assertion", "The assertion's subject is not this user's external_id")
        }
        const expires = new Date(Math.min(at.getTime() + ACTOR_TOKEN_SECONDS * 1000, exp! * 1000))
        // The last moment the assertion could still be accepted: until then its jti is kept.
        const assertionExpires = new Date(
          (Math.min(iat! + ASSERTION_MAX_AGE_SECONDS, exp!) + ASSERTION_CLOCK_TOLERANCE_SECONDS) * 1000
        )
        const token = `act_${randomBytes(32).toString("base64url")}`
        const id = yield* makeId("as")
        yield* sql.withTransaction(Effect.gen(function*() {
          if (!(yield* repo.useAssertion({ cell: p, issuer: idp.issuer, jti, expiresAt: assertionExpires, at }))) {
            return yield* forbidden("invalid_assertion", "The assertion was not accepted: this assertion was already used")
          }
          yield* repo.insert({ id, cell: p, userId: user.id, keyId: p.keyId, tokenHash: hashToken(token), expiresAt: expires, at })
        }))
        // Housekeeping, in its own (sub)transaction: a failure is logged and does not undo the session.
        yield* sql.withTransaction(repo.sweepUsedAssertions(at, SWEEP_LIMIT)).pipe(
          Effect.catchAll((error) => Effect.logWarning("sweeping used assertions failed", error))
        )
        return { id, object: "actor_session" as const, user_id: user.id, token, expires_at: toIso(expires) }
      })

    /**
     * The acting user of a request: `X-Actor-Token` must be a live token made with this very key
     * (D19: another key of the same environment gets the same answer as an unknown token), which
     * still works, for a user that still exists. Missing: 403 `actor_required`; anything else wrong:
     * 403 `actor_token_invalid`.
     */
    const requireActor = (p: Principal, token: string | undefined) =>
      Effect.gen(function*() {
        if (token === undefined || token === "") {
          return yield* forbidden("actor_required", "This action needs a user: send an actor token in X-Actor-Token")
        }
        // the pipeline resolved this request's token already (for the idempotency scope)
        const resolved = yield* actingUser
        if (resolved !== undefined) return resolved satisfies Actor
        const at = yield* now
        const row = yield* repo.userOfToken(p, hashToken(token), at)
        if (!row) {
          return yield* forbidden("actor_token_invalid", "The actor token is unknown, expired, or its user or key is no longer active")
        }
        return { type: "user", id: row.user_id } satisfies Actor
      })

    return {
      createSession: (p: Gated<Principal>, body: { user_id: string; assertion: string }) => dieOnSqlError(createSession(p, body)),
      requireActor: (p: Principal, token: string | undefined) => dieOnSqlError(requireActor(p, token))
    } as const
  }),
  dependencies: [ActorSessionsRepo.Default, PlatformRepo.Default, EnvironmentSettings.Default, Destinations.Default]
}) {}
