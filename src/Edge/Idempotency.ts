/**
 * Idempotency (D5), in Postgres. A request reserves its key with one INSERT; a racing duplicate
 * finds the reservation and gets 409 `idempotency_key_in_use` (or the stored replay once the first
 * completes). Completed responses are kept for the replay window; 400 validation failures, 401,
 * 403, 429, 503 and defects are released instead, so they are safe to retry.
 */
import { createHash } from "node:crypto"

import { Clock, Duration, Effect, Fiber, Schedule } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Conflict, type InvalidRequest } from "../Kernel/Errors.js"
import { canonicalJson } from "../Kernel/Json.js"
import { IdempotencyRepo, type Scope, type StoredResponse } from "./IdempotencyRepo.js"

export type { Scope, StoredResponse }

export type Begin =
  /** `takeover`: the key was reserved by a request that died without answering (it may have acted) */
  | { readonly _tag: "Proceed"; readonly takeover: boolean }
  | { readonly _tag: "Replay"; readonly response: StoredResponse }

/** 1..255 characters of 0x21..0x7E (D5). */
export const validKey = (key: string): boolean => /^[\x21-\x7E]{1,255}$/.test(key)

export const fingerprint = (method: string, path: string, body: string): string => {
  let canonical = body
  if (body.trim() !== "") {
    try {
      canonical = canonicalJson(JSON.parse(body))
    } catch {
      canonical = body
    }
  }
  return createHash("sha256").update(`${method}\n${path}\n${canonical}`).digest("hex")
}

/** Statuses whose response is stored for replay. Everything else is released (safe to retry). */
export const isStored = (status: number): boolean => (status >= 200 && status < 300) || status === 404 || status === 409 || status === 410

/** Fields that carry a secret shown once: a key's `secret`, an actor session's `token`. */
const SECRET_FIELDS = new Set(["secret", "token"])

/** A secret in a stored response replays as metadata only: every secret field becomes null. */
export const redactSecrets = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(redactSecrets)
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = SECRET_FIELDS.has(k) && typeof v === "string" ? null : redactSecrets(v)
    return out
  }
  return value
}

/**
 * A digest of a scope (tenant and environment are stored beside it), for resources to remember
 * which idempotent request made them: a retry taking over a dead holder's reservation finds them.
 */
export const scopeRef = (s: Scope): string => createHash("sha256").update([s.actor, s.method, s.path, s.key].join("\n")).digest("base64url")

export class Idempotency extends Effect.Service<Idempotency>()("Idempotency", {
  scoped: Effect.gen(function*() {
    const repo = yield* IdempotencyRepo
    const config = yield* AppConfig

    /** Reserve the key, or say why not. */
    const begin = (s: Scope, fp: string): Effect.Effect<Begin, Conflict | InvalidRequest> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const lockedUntil = new Date(now + config.idempotencyLockSeconds * 1000)
        const expires = new Date(now + config.idempotencyTtlSeconds * 1000)
        for (let attempt = 0; attempt < 3; attempt++) {
          if (yield* repo.reserve(s, fp, new Date(now), lockedUntil, expires)) return { _tag: "Proceed", takeover: false } as const
          const row = yield* repo.find(s)
          if (!row) continue // released meanwhile: try again
          if (row.expires_at.getTime() <= now) {
            // Outside the replay window: the old record no longer exists for the caller.
            yield* repo.deleteExpired(s, new Date(now))
            continue
          }
          if (row.fingerprint !== fp) {
            return yield* new Conflict({
              code: "idempotency_key_reused",
              message: "This Idempotency-Key was already used with a different request payload"
            })
          }
          if (row.state === "completed") {
            return { _tag: "Replay", response: { status: row.status!, headers: row.headers ?? {}, body: row.body ?? "" } } as const
          }
          if (row.locked_until !== null && row.locked_until.getTime() <= now) {
            // The original holder died without finishing: take the reservation over (only one taker wins).
            if (yield* repo.takeOver(s, fp, new Date(now), lockedUntil)) return { _tag: "Proceed", takeover: true } as const
            continue
          }
          return yield* new Conflict({
            code: "idempotency_key_in_use",
            message: "A request with this Idempotency-Key is still being processed; retry later"
          })
        }
        return yield* new Conflict({
          code: "idempotency_key_in_use",
          message: "A request with this Idempotency-Key is still being processed; retry later"
        })
      }).pipe(Effect.catchTag("SqlError", Effect.die), Effect.withSpan("Idempotency.begin"))

    const complete = (s: Scope, response: StoredResponse) =>
      repo.complete(s, response).pipe(Effect.orDie, Effect.withSpan("Idempotency.complete"))

    const release = (s: Scope) => repo.release(s).pipe(Effect.orDie, Effect.withSpan("Idempotency.release"))

    /**
     * Runs the work of a reserved request to its end even if the caller is interrupted (the client
     * disconnected): the outcome is still stored, so a retry with the key replays it instead of
     * executing a second time (an interrupted handler may already have committed). Only the
     * service's shutdown interrupts it.
     */
    const serviceScope = yield* Effect.scope

    /**
     * Keeps the reservation of a request that is still working: `locked_until` moves forward every
     * third of the lock time, so only a holder that died (its process gone) is ever taken over,
     * however long the work takes.
     */
    const heartbeat = (s: Scope) => {
      const extend = Effect.flatMap(Clock.currentTimeMillis, (now) => repo.extend(s, new Date(now + config.idempotencyLockSeconds * 1000)))
      return extend.pipe(
        Effect.delay(Duration.millis((config.idempotencyLockSeconds * 1000) / 3)),
        Effect.forever,
        Effect.catchAllCause((cause) => Effect.logWarning("idempotency lock extension failed", cause))
      )
    }

    const detached = <A, E, R>(s: Scope, work: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      Effect.flatMap(
        // interruptible: a fiber forked where interruption is off would inherit that, and the
        // scope could not stop it when the work ends
        Effect.forkIn(Effect.scoped(Effect.zipRight(Effect.forkScoped(Effect.interruptible(heartbeat(s))), work)), serviceScope),
        Fiber.join
      )

    /** Deletes records past the replay window. */
    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.orDie(repo.sweep(new Date(now))))

    yield* sweep.pipe(
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.catchAllCause((cause) => Effect.logWarning("idempotency sweep failed", cause)),
      Effect.forkScoped
    )

    return { begin, complete, release, detached, sweep } as const
  }),
  dependencies: [IdempotencyRepo.Default]
}) {}
