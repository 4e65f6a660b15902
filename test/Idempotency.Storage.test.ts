/**
 * What idempotency (D5) stores and for how long, over real HTTP on a fresh database: 400, 401,
 * 403 and 429 are not stored (the same key executes later); the Idempotency-Key header is required
 * on mutations and validated; records replay for 7 days and the background sweep deletes them
 * after (TestClock).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { validKey } from "../src/Edge/Idempotency.js"
import { makeTestApp } from "./support/App.js"
import { createKey, type Reply, request } from "./support/Client.js"
import { count, expectFreshError, expectReplayOf, idemRows, replayed, sandbox } from "./support/Idempotency.js"
import { isTerminal, postUser, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually, realSleep } from "./support/Waiting.js"

describe("Idempotency over HTTP: not stored", () => {
  it.live("400 validation failures are not stored: the same key with a valid body executes", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const invalid = yield* postUser(sb.P, sb.key, { external_id: "v1" }, "k-400")
      expectFreshError(invalid, 400, "parameter_missing")
      const unreadable = yield* request("POST", `${sb.P}/users`, { key: sb.key, rawBody: "{not json", idempotencyKey: "k-400" })
      expect(unreadable.status).toBe(400)
      expect(yield* idemRows({ tenantId: sb.tenantId })).toEqual([])

      const valid = yield* postUser(sb.P, sb.key, { external_id: "v1", display_name: "Valid" }, "k-400")
      expect(valid.status).toBe(201)
      expect(replayed(valid)).toBeNull()

      // a handler-level validation failure (400) is released too
      const path = `${sb.P}/users/${valid.body.data.id}`
      const empty = yield* request("PATCH", path, { key: sb.key, body: {}, idempotencyKey: "k-400-patch" })
      expectFreshError(empty, 400, "parameter_missing")
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "k-400-patch" })).toEqual([])
      const patched = yield* request("PATCH", path, { key: sb.key, body: { display_name: "Now" }, idempotencyKey: "k-400-patch" })
      expect(patched.status).toBe(200)
      expect(replayed(patched)).toBeNull()
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("401 and 403 are not stored", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const readOnly = yield* createKey(sb.tenantId, ["users:read"], "read only")
      const body = { external_id: "nope", display_name: "Nope" }

      const unauthenticated = yield* request("POST", `${sb.P}/users`, { key: "sk_not_a_real_key", body, idempotencyKey: "k-auth" })
      expectFreshError(unauthenticated, 401, unauthenticated.body?.error?.code)
      expect(unauthenticated.body.error.type).toBe("authentication_error")
      const noKey = yield* request("POST", `${sb.P}/users`, { body, idempotencyKey: "k-auth" })
      expect(noKey.status).toBe(401)

      const forbidden = yield* request("POST", `${sb.P}/users`, { key: readOnly.secret, body, idempotencyKey: "k-auth" })
      expectFreshError(forbidden, 403, "missing_scope")
      const forbiddenAgain = yield* request("POST", `${sb.P}/users`, { key: readOnly.secret, body, idempotencyKey: "k-auth" })
      expectFreshError(forbiddenAgain, 403, "missing_scope")

      expect(yield* idemRows()).toEqual([])
      // the same key still executes for a key that may
      const ok = yield* postUser(sb.P, sb.key, body, "k-auth")
      expect(ok.status).toBe(201)
      expect(replayed(ok)).toBeNull()
    }).pipe(Effect.provide(makeTestApp())))

  it.live("429 is not stored: after the limit refills the same key executes", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      // drain the burst (2) with reads
      let limited: Reply | undefined
      for (let i = 0; i < 6 && limited === undefined; i++) {
        const r = yield* request("GET", `${sb.P}/users`, { key: sb.key })
        if (r.status === 429) limited = r
      }
      expect(limited?.status).toBe(429)
      const body = { external_id: "limited", display_name: "L" }
      const refused = yield* postUser(sb.P, sb.key, body, "k-429")
      expectFreshError(refused, 429, "rate_limited")
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      expect(yield* idemRows()).toEqual([])

      yield* realSleep(Number(refused.headers.get("retry-after")) * 1000 + 100)
      const later = yield* postUser(sb.P, sb.key, body, "k-429")
      expect(later.status).toBe(201)
      expect(replayed(later)).toBeNull()
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp({ rateLimit: { ratePerSecond: 1, burst: 2 } }))))
})

describe("Idempotency over HTTP: the header", () => {
  it.live("missing on POST, PATCH, DELETE: 400 idempotency_key_required; malformed: 400; 255 printable chars: fine", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const body = { external_id: "hdr", display_name: "H" }
      const missing = yield* postUser(sb.P, sb.key, body, false)
      expectFreshError(missing, 400, "idempotency_key_required")
      expect(missing.body.error.param).toBe("Idempotency-Key")
      expectFreshError(
        yield* request("PATCH", `${sb.P}/users/user_x`, { key: sb.key, body: { display_name: "x" }, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )
      expectFreshError(
        yield* request("DELETE", `${sb.P}/users/user_x`, { key: sb.key, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )
      expectFreshError(
        yield* request("POST", `${sb.P}/api-keys/${sb.keyId}/revoke`, { key: sb.key, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )

      for (const bad of ["has space", "x".repeat(256), "", "tab\there"]) {
        const r = yield* postUser(sb.P, sb.key, body, bad)
        expect([bad.length, r.status, r.body?.error?.type]).toEqual([bad.length, 400, "invalid_request"])
        expect(r.body.error.param).toBe("Idempotency-Key")
      }
      expect(yield* idemRows()).toEqual([])
      expect(yield* count("users", sb.tenantId)).toBe(0)

      const longest = Array.from({ length: 255 }, (_, i) => String.fromCharCode(0x21 + (i % 94))).join("")
      expect(validKey(longest)).toBe(true)
      const ok = yield* postUser(sb.P, sb.key, body, longest)
      expect(ok.status).toBe(201)
      expectReplayOf(yield* postUser(sb.P, sb.key, body, longest), ok)
      // reads need none
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.key })).status).toBe(200)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency: the 7-day replay window (TestClock)", () => {
  const DAY = 86_400
  // Long background intervals keep TestClock.adjust over days to a few hundred wake-ups.
  const quiet = { cellIdleTimeoutSeconds: 30 * DAY }

  it.effect("replays until 7 days have passed, then the same key and payload execute anew", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sb = yield* sandbox()
        const send = request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "nightly" }, idempotencyKey: "k-week" })
        const first = yield* send
        expect(first.status).toBe(201)

        yield* TestClock.adjust("6 days")
        expectReplayOf(yield* send, first)
        yield* TestClock.adjust(`${DAY - 1} seconds`) // 1 s before the window closes
        expectReplayOf(yield* send, first)
        expect(yield* count("service_actors", sb.tenantId)).toBe(1)

        yield* TestClock.adjust("1 second") // exactly 7 days: outside the window
        const anew = yield* send
        expect(anew.status).toBe(201)
        expect(replayed(anew)).toBeNull()
        expect(anew.body.data.id).not.toBe(first.body.data.id)
        expect(yield* count("service_actors", sb.tenantId)).toBe(2)
        // the new execution starts a new window
        expectReplayOf(yield* send, anew)
      }).pipe(Effect.provide(makeTestApp({ ...quiet, sweepIntervalSeconds: 30 * DAY })))
    }))

  it.effect("the background sweep deletes records once they are past the window, and only those", () =>
    Effect.gen(function*() {
      const t0 = Date.now()
      yield* TestClock.setTime(t0)
      // An hourly sweep: the 7 days of TestClock below stay a few hundred wake-ups (the default 60 s
      // would be ~10,000, each a real query).
      const interval = 3600
      yield* Effect.gen(function*() {
        const sb = yield* sandbox()
        const sql = yield* SqlClient.SqlClient
        const first = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "swept" }, idempotencyKey: "k-sweep" })
        expect(first.status).toBe(201)
        // a record that leaves its window after 1 day: shows when a sweep has run
        yield* sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint,
                                                 status, headers, body, created_at, expires_at)
                   VALUES (${sb.tenantId}, 'sandbox', ${`api_key:${sb.keyId}`}, 'POST', ${`${sb.P}/service-actors`},
                           'k-canary', 'x', 201, '{}'::jsonb, '{}', ${new Date(t0)},
                           ${new Date(t0 + DAY * 1000)})`.pipe(Effect.orDie)
        const keys = Effect.map(idemRows({ tenantId: sb.tenantId }), (rows) => rows.map((r) => r.key).sort())

        /**
         * A sweep runs a real query: it may still be running when TestClock.adjust returns, and
         * only then schedules its next run. Nudge the clock by one interval until `done`.
         */
        const sweepUntil = (done: (keys: ReadonlyArray<string>) => boolean) =>
          Effect.gen(function*() {
            let current = yield* keys
            for (let i = 0; i < 50 && !done(current); i++) {
              yield* TestClock.adjust(`${interval} seconds`)
              yield* realSleep(20)
              current = yield* keys
            }
            return current
          })

        yield* TestClock.setTime(t0 + DAY * 1000)
        expect(yield* sweepUntil((k) => !k.includes("k-canary"))).toEqual(["k-sweep"])

        // 7 days after the request: its record goes too, without any request touching it
        yield* TestClock.setTime(t0 + 7 * DAY * 1000)
        expect(yield* sweepUntil((k) => !k.includes("k-sweep"))).toEqual([])
        const now = yield* TestClock.currentTimeMillis
        expect(now - t0).toBeLessThan(7 * DAY * 1000 + 50 * interval * 1000)
      }).pipe(Effect.provide(makeTestApp({ ...quiet, sweepIntervalSeconds: interval })))
    }))
})

describe("Idempotency: a gate sent ahead (createRun, GateAhead)", () => {
  it.live("its claim holds for a fresh key; a record within its window replays, another payload is 409, a record past it executes anew", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "text", text: "once" }])
      const sql = yield* SqlClient.SqlClient
      const conversation = yield* s.conversation()
      const first = yield* s.startRun(conversation.id, "hi", { idempotencyKey: "k-ahead" })
      expect(first.status, first.text).toBe(202)
      expect(replayed(first)).toBeNull()
      yield* eventually(s.getRun(first.body.data.id), (r) => isTerminal(r.status))

      // within its window: the claim fails, the request is served again with the gate first
      const again = yield* s.startRun(conversation.id, "hi", { idempotencyKey: "k-ahead" })
      expectReplayOf(again, first)
      const other = yield* s.startRun(conversation.id, "other", { idempotencyKey: "k-ahead" })
      expect(other.status).toBe(409)
      expect(other.body.error.code).toBe("idempotency_key_reused")
      expect(yield* count("runs", s.tenantId)).toBe(1)

      // past its window: the claim deletes the record and the request executes anew
      yield* sql`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = ${s.tenantId} AND key = 'k-ahead'`
        .pipe(Effect.orDie)
      const anew = yield* s.startRun(conversation.id, "hi", { idempotencyKey: "k-ahead" })
      expect(anew.status, anew.text).toBe(202)
      expect(replayed(anew)).toBeNull()
      expect(anew.body.data.id).not.toBe(first.body.data.id)
      expect(yield* count("runs", s.tenantId)).toBe(2)
      expect((yield* idemRows({ tenantId: s.tenantId, key: "k-ahead" })).length).toBe(1)
      // an audit entry per execution and one for the 409 (each written once, though served twice), none for the replay
      const audited = yield* sql<
        { n: number }
      >`SELECT count(*)::int AS n FROM audit_entries WHERE tenant_id = ${s.tenantId} AND action = 'createRun'`
        .pipe(Effect.orDie)
      expect(audited[0]!.n).toBe(3)
    }).pipe(Effect.provide(makeTestApp())))
})
