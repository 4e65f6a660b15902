/**
 * Idempotency (D5), in Postgres. A request reserves its key with one INSERT; a racing duplicate
 * finds the reservation and gets 409 `idempotency_key_in_use` (or the stored replay once the first
 * completes). Completed responses are kept for the replay window; 400 validation failures, 401,
 * 403, 429, 503 and defects are released instead, so they are safe to retry.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Fiber, Schedule } from "effect"
import { createHash } from "node:crypto"
import { Conflict, InvalidRequest } from "../Kernel/Errors.js"
import { AppConfig } from "../Config/AppConfig.js"
import { canonicalJson } from "../Kernel/Json.js"

export interface Scope {
  readonly tenantId: string
  readonly environment: string
  readonly actor: string
  readonly method: string
  readonly path: string
  readonly key: string
}

export interface StoredResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

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
export const isStored = (status: number): boolean =>
  (status >= 200 && status < 300) || status === 404 || status === 409 || status === 410

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

interface Row {
  readonly fingerprint: string
  readonly state: "in_flight" | "completed"
  readonly locked_until: Date | null
  readonly status: number | null
  readonly headers: Record<string, string> | null
  readonly body: string | null
  readonly expires_at: Date
}

/**
 * A digest of a scope (tenant and environment are stored beside it), for resources to remember
 * which idempotent request made them: a retry taking over a dead holder's reservation finds them.
 */
export const scopeRef = (s: Scope): string =>
  createHash("sha256").update([s.actor, s.method, s.path, s.key].join("\n")).digest("base64url")

export class Idempotency extends Effect.Service<Idempotency>()("Idempotency", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig

    const where = (s: Scope) =>
      sql`tenant_id = ${s.tenantId} AND environment = ${s.environment} AND actor = ${s.actor}
          AND method = ${s.method} AND path = ${s.path} AND key = ${s.key}`

    /** Reserve the key, or say why not. */
    const begin = (s: Scope, fp: string): Effect.Effect<Begin, Conflict | InvalidRequest> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const lockedUntil = new Date(now + config.idempotencyLockSeconds * 1000)
        const expires = new Date(now + config.idempotencyTtlSeconds * 1000)
        const reserve = sql`
          INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint, state,
                                        locked_until, created_at, expires_at)
          VALUES (${s.tenantId}, ${s.environment}, ${s.actor}, ${s.method}, ${s.path}, ${s.key}, ${fp},
                  'in_flight', ${lockedUntil}, ${new Date(now)}, ${expires})
          ON CONFLICT DO NOTHING
          RETURNING key`
        for (let attempt = 0; attempt < 3; attempt++) {
          const inserted = yield* reserve
          if (inserted.length > 0) return { _tag: "Proceed", takeover: false } as const
          const [row] = yield* sql<Row>`SELECT fingerprint, state, locked_until, status, headers, body, expires_at
                                         FROM idempotency_keys WHERE ${where(s)}`
          if (!row) continue // released meanwhile: try again
          if (row.expires_at.getTime() <= now) {
            // Outside the replay window: the old record no longer exists for the caller.
            yield* sql`DELETE FROM idempotency_keys WHERE ${where(s)} AND expires_at <= ${new Date(now)}`
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
            // The original holder died without finishing: take the reservation over. The lock is
            // re-checked in the UPDATE (not compared for equality with the value read: a timestamp
            // Postgres wrote has microseconds a JS Date drops, so `=` would never match); a racing
            // taker blocks on the row and then sees the fresh lock, so only one wins.
            const taken = yield* sql`UPDATE idempotency_keys SET locked_until = ${lockedUntil}
                                     WHERE ${where(s)} AND state = 'in_flight' AND fingerprint = ${fp}
                                       AND locked_until <= ${new Date(now)}
                                     RETURNING key`
            if (taken.length > 0) return { _tag: "Proceed", takeover: true } as const
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
      sql`UPDATE idempotency_keys SET state = 'completed', locked_until = NULL, status = ${response.status},
                 headers = ${JSON.stringify(response.headers)}::jsonb, body = ${response.body}
          WHERE ${where(s)} AND state = 'in_flight'`.pipe(Effect.asVoid, Effect.orDie, Effect.withSpan("Idempotency.complete"))

    const release = (s: Scope) =>
      sql`DELETE FROM idempotency_keys WHERE ${where(s)} AND state = 'in_flight'`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Effect.withSpan("Idempotency.release")
      )

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
      const extend = Effect.flatMap(Clock.currentTimeMillis, (now) =>
        sql`UPDATE idempotency_keys SET locked_until = ${new Date(now + config.idempotencyLockSeconds * 1000)}
            WHERE ${where(s)} AND state = 'in_flight'`)
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
    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      sql`DELETE FROM idempotency_keys WHERE expires_at <= ${new Date(now)} RETURNING key`.pipe(
        Effect.map((r) => r.length),
        Effect.orDie
      ))

    yield* sweep.pipe(
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.catchAllCause((cause) => Effect.logWarning("idempotency sweep failed", cause)),
      Effect.forkScoped
    )

    return { begin, complete, release, detached, sweep } as const
  })
}) {}
