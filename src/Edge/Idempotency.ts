/**
 * Idempotency (D5, D19), in Postgres, atomic with the mutation: the request pipeline runs a
 * mutation in one transaction, in which the handler's gate (`check`) looks for a stored response
 * (replayed as it was; a changed payload is 409 `idempotency_key_reused`) and otherwise takes the
 * scope's advisory lock (a concurrent duplicate gets 409 `idempotency_key_in_use`), and the pipeline stores
 * the response (`store`) before the commit. So a crash leaves either nothing (a retry executes
 * once) or the effect with its response (a retry replays it), and a dead holder's lock goes with
 * its connection: no reservation outlives a process. 2xx, 404, 409 and 410 are stored for the
 * replay window; 400, 401, 403, 429, 500 and 503 roll the transaction back (safe to retry).
 *
 * Everything of idempotency is here: the key's form, the fingerprint, which answers are stored and
 * in what form (secrets redacted, the headers a replay gives again), the gate a handler passes
 * (`Gate`, reached through the `UnitOfWork` service's `gated`), storing and detaching the work.
 */
import { createHash } from "node:crypto"

import { HttpServerResponse } from "@effect/platform"
import { Clock, Effect, Fiber, Option, Schedule } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Conflict } from "../Kernel/Errors.js"
import { canonicalJson } from "../Kernel/Json.js"
import { traced } from "../Kernel/Spans.js"
import type { RefineReplay } from "../Kernel/UnitOfWork.js"
import { IdempotencyRepo, type Scope, type StoredResponse } from "./IdempotencyRepo.js"

export type { Scope, StoredResponse }

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

/** Headers a handler set that are part of the response a replay gives again (D5, D7). */
const REPLAYED_HEADERS = ["location", "preference-applied"] as const

/**
 * The stored form of an answer (its JSON body given parsed, undefined when it is not JSON): the
 * secret fields of its body become null (D5); the headers a replay gives again.
 */
export const storedForm = (
  status: number,
  parsed: unknown,
  text: () => string,
  requestId: string,
  headers: Record<string, string>
): StoredResponse => {
  const body = parsed === undefined ? text() : JSON.stringify(redactSecrets(parsed))
  const kept: Record<string, string> = { "x-request-id": requestId }
  for (const name of REPLAYED_HEADERS) if (headers[name]) kept[name] = headers[name]
  return { status, headers: kept, body }
}

/**
 * A mutation's idempotency gate, passed by its handler once the request is known valid (routing,
 * scopes, validation and tenancy are decided before it): `check` gives the stored response to
 * replay (its headers set on `headers`, the answer's), none to execute, or 409. `outcome` says how
 * it ended, for the pipeline: a mutation that answered 2xx without passing it is a defect.
 *
 * A gate sent ahead (`ahead`) passes at once: its claim of the scope goes with the transaction's
 * next statement (no round trip of its own), and holds if that statement ran. `claim` says how it
 * went: a request whose work was not kept while its claim did not hold (`unsettled`) is served
 * again with a gate that waits for its answer (a replay, a 409: what the claim's failure meant).
 */
export interface Gate {
  readonly check: (
    refine?: RefineReplay
  ) => Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>, Conflict>
  outcome: "pending" | "passed" | "replayed" | "refused"
  claim: "none" | "sent ahead" | "held" | "failed"
}

/** The gate's claim was sent ahead and did not hold (or its answer never came): its work must not stand. */
export const unsettled = (gate: Gate): boolean => gate.claim === "sent ahead" || gate.claim === "failed"

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

const inUse = new Conflict({
  code: "idempotency_key_in_use",
  message: "A request with this Idempotency-Key is still being processed; retry later"
})
const reused = new Conflict({
  code: "idempotency_key_reused",
  message: "This Idempotency-Key was already used with a different request payload"
})

export class Idempotency extends Effect.Service<Idempotency>()("Idempotency", {
  scoped: Effect.gen(function*() {
    const repo = yield* IdempotencyRepo
    const config = yield* AppConfig

    /**
     * The gate, inside the request's transaction: the stored response to replay (any number of
     * retries of a finished request replay it at once, side by side), or none to execute, holding
     * the scope; 409 while another request with the scope is in flight and nothing is stored yet.
     */
    const check = (s: Scope, fp: string): Effect.Effect<Option.Option<StoredResponse>, Conflict> =>
      Effect.gen(function*() {
        const { locked, record: row } = yield* repo.lockAndFind(s)
        const now = yield* Clock.currentTimeMillis
        // Outside the replay window a record no longer exists.
        if (row !== undefined && row.expires_at.getTime() > now) {
          if (row.fingerprint !== fp) return yield* reused
          return Option.some({ status: row.status, headers: row.headers, body: row.body })
        }
        if (!locked) return yield* inUse
        if (row !== undefined) yield* repo.remove(s)
        return Option.none()
      }).pipe(Effect.orDie, traced("Idempotency.check"))

    /**
     * The statement storing the response, for the request's transaction: written with the
     * request's audit entry, in one statement (AuditTrail.write).
     */
    const storing = (s: Scope, fp: string, response: StoredResponse) =>
      Effect.map(
        Clock.currentTimeMillis,
        (now) => repo.insert(s, fp, response, new Date(now), new Date(now + config.idempotencyTtlSeconds * 1000))
      )

    /**
     * Runs the work of a request to its end even if the caller is interrupted (the client
     * disconnected): it may already have committed, and its outcome must be stored, so a retry
     * replays it. Only the service's shutdown interrupts it.
     */
    const serviceScope = yield* Effect.scope
    const detached = <A, E, R>(work: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
      // interruptible: a fiber forked where interruption is off would inherit that. Awaited, not
      // joined: the request takes the work's outcome, not its fiber-locals (joining diffs the
      // fiber's whole context against the request's, a cost per mutation).
      Effect.flatMap(Effect.forkIn(Effect.interruptible(work), serviceScope), (fiber) => Effect.flatten(Fiber.await(fiber)))

    /** Deletes records past the replay window. */
    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.orDie(repo.sweep(new Date(now))))

    yield* sweep.pipe(
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.catchAllCause((cause) => Effect.logWarning("idempotency sweep failed", cause)),
      Effect.forkScoped
    )

    /** The gate of the mutation of `s` with fingerprint `fp`, whose answer's headers are `headers`; its claim sent `ahead` if it can be. */
    const gate = (s: Scope, fp: string, headers: Record<string, string>, ahead: boolean): Gate => {
      const claimed = (error: Error | null) => {
        made.claim = error === null ? "held" : "failed"
      }
      const sentAhead = ahead
        ? Effect.flatMap(Clock.currentTimeMillis, (now) => repo.claimAhead(s, new Date(now), claimed))
        : Effect.succeed(false)
      const made: Gate = {
        outcome: "pending",
        claim: "none",
        check: (refine) =>
          sentAhead.pipe(
            Effect.flatMap((sent) => {
              if (!sent) return check(s, fp)
              made.claim = "sent ahead"
              return Effect.succeedNone
            }),
            // the capability's reading of its stored answer (a `Prefer: wait` run that ended meanwhile)
            Effect.flatMap(Option.match({
              onNone: () => Effect.succeedNone,
              onSome: (stored) =>
                refine === undefined ? Effect.succeedSome(stored) : Effect.map(refine(stored), Option.orElse(() => Option.some(stored)))
            })),
            Effect.tapBoth({
              onFailure: () => Effect.sync(() => (made.outcome = "refused")),
              onSuccess: (stored) => Effect.sync(() => (made.outcome = Option.isSome(stored) ? "replayed" : "passed"))
            }),
            Effect.map(Option.map((stored) => {
              Object.assign(headers, stored.headers, { "idempotent-replayed": "true" })
              return HttpServerResponse.text(stored.body, { status: stored.status, contentType: "application/json" })
            }))
          )
      }
      return made
    }

    return { check, gate, storing, detached, sweep } as const
  }),
  dependencies: [IdempotencyRepo.Default]
}) {}
