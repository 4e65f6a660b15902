/**
 * Idempotency (D5, D19) when requests overlap, over real HTTP on a fresh database: a changed
 * payload under a used key (409 idempotency_key_reused), a request still in flight (409
 * idempotency_key_in_use) and a holder dying, 20 concurrent identical requests, a client that went
 * away, and a long request. (Crashes at each commit boundary: Idempotency.Crash.test.ts.)
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { makeTestApp, TestApp } from "./support/App.js"
import { type Reply, request } from "./support/Client.js"
import { count, expectFreshError, expectReplayOf, holdScope, idemRows, replayed, sandbox } from "./support/Idempotency.js"
import { postUser } from "./support/Sandboxes.js"
import { realSleep } from "./support/Waiting.js"

describe("Idempotency over HTTP: conflicts", () => {
  it.live("a changed payload with the same key is 409 idempotency_key_reused; key order and whitespace are no change", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const first = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        rawBody: `{"external_id":"ord","display_name":"Ord","email":"o@example.com"}`,
        idempotencyKey: "k-order"
      })
      expect(first.status).toBe(201)
      const reordered = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        rawBody: ` { "email" : "o@example.com",\n "display_name":"Ord", "external_id":"ord" } `,
        idempotencyKey: "k-order"
      })
      expectReplayOf(reordered, first)

      for (
        const changed of [
          { external_id: "ord", display_name: "Changed", email: "o@example.com" },
          { external_id: "ord", display_name: "Ord" }, // a field left out
          { external_id: "ord", display_name: "Ord", email: "other@example.com" }
        ]
      ) {
        const r = yield* postUser(sb.P, sb.key, changed, "k-order")
        expectFreshError(r, 409, "idempotency_key_reused")
        expect(r.body.error.type).toBe("conflict")
      }
      // D19: a body that is not valid is refused before the key is even looked at
      expectFreshError(
        yield* postUser(sb.P, sb.key, { external_id: "ord", display_name: "Ord", email: "o@example.com", extra: 1 }, "k-order"),
        400,
        "unknown_parameter"
      )
      // the stored response is unchanged and still replays
      expectReplayOf(
        yield* request("POST", `${sb.P}/users`, {
          key: sb.key,
          rawBody: `{"external_id":"ord","display_name":"Ord","email":"o@example.com"}`,
          idempotencyKey: "k-order"
        }),
        first
      )
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("while the original is in flight: 409 idempotency_key_in_use; a holder that dies releases the key at once", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const path = `${sb.P}/users`
      const body = JSON.stringify({ external_id: "inflight", display_name: "In Flight" })
      const send = (key: string, raw = body) => request("POST", path, { key: sb.key, rawBody: raw, idempotencyKey: key })
      // Another request with the key is in flight: it holds the scope's lock in its transaction
      // (here a connection of our own holds it, as that request's would).
      const holder = yield* holdScope({ tenantId: sb.tenantId, actor: `api_key:${sb.keyId}`, path, key: "k-busy" })
      expectFreshError(yield* send("k-busy"), 409, "idempotency_key_in_use")
      expectFreshError(yield* send("k-busy"), 409, "idempotency_key_in_use")
      // whatever its payload: the key is in use
      expectFreshError(
        yield* send("k-busy", JSON.stringify({ external_id: "inflight", display_name: "Other" })),
        409,
        "idempotency_key_in_use"
      )
      expect(yield* count("users", sb.tenantId)).toBe(0)
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "k-busy" })).toEqual([])

      // the holder died (its connection went away, as a killed process's does): the key is free at once
      yield* holder.release
      const taken = yield* send("k-busy")
      expect(taken.status).toBe(201)
      expect(replayed(taken)).toBeNull()
      const [row] = yield* idemRows({ tenantId: sb.tenantId, key: "k-busy" })
      expect(row).toMatchObject({ status: 201 })
      expectReplayOf(yield* send("k-busy"), taken)
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("20 identical concurrent requests: one execution; every answer is that 201 or 409 in_use", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const payload = { external_id: "race", display_name: "Race" }
      const replies = yield* Effect.all(
        Array.from({ length: 20 }, () => postUser(sb.P, sb.key, payload, "k-race")),
        { concurrency: "unbounded" }
      )
      const created = replies.filter((r) => r.status === 201)
      const busy = replies.filter((r) => r.status === 409)
      expect(created.length + busy.length).toBe(20)
      expect(created.length).toBeGreaterThanOrEqual(1)
      for (const r of busy) expectFreshError(r, 409, "idempotency_key_in_use")
      const originals = created.filter((r) => replayed(r) === null)
      expect(originals.length).toBe(1)
      for (const r of created) expect(r.text).toBe(originals[0]!.text)
      for (const r of created.filter((r) => replayed(r) !== null)) expectReplayOf(r, originals[0]!)
      expect(yield* count("users", sb.tenantId)).toBe(1)

      // and afterwards, everyone gets the replay
      expectReplayOf(yield* postUser(sb.P, sb.key, payload, "k-race"), originals[0]!)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: client disconnects", () => {
  it.live("a request whose client went away still completes once; the retry replays it", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const app = yield* TestApp
      const sql = yield* SqlClient.SqlClient
      // A slow INSERT that a query cancel cannot stop: the write commits even though the caller
      // is interrupted, which is what a cancel racing a commit looks like.
      yield* sql.unsafe(`
        CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.name = 'slow' THEN
            BEGIN
              PERFORM pg_sleep(1);
            EXCEPTION WHEN query_canceled THEN
              NULL;
            END;
          END IF;
          RETURN NEW;
        END $$`).pipe(Effect.orDie)
      yield* sql.unsafe(`CREATE TRIGGER test_slow BEFORE INSERT ON service_actors
                         FOR EACH ROW EXECUTE FUNCTION test_slow_insert()`).pipe(Effect.orDie)
      const sleeping = Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                           WHERE datname = current_database() AND wait_event = 'PgSleep'`.pipe(Effect.orDie),
        (rows) => rows[0]!.n
      )

      const controller = new AbortController()
      const call = yield* Effect.fork(Effect.promise(() =>
        fetch(`${app.baseUrl}${sb.P}/service-actors`, {
          method: "POST",
          headers: { authorization: `Bearer ${sb.key}`, "content-type": "application/json", "idempotency-key": "k-gone" },
          body: JSON.stringify({ name: "slow" }),
          signal: controller.signal
        }).then(() => "answered" as const, () => "aborted" as const)
      ))
      for (let i = 0; i < 100 && (yield* sleeping) === 0; i++) yield* realSleep(20)
      expect(yield* sleeping).toBe(1)
      controller.abort()
      expect(yield* Fiber.join(call)).toBe("aborted")

      // retry like a client would, until the original is no longer in flight
      let retry: Reply | undefined
      for (let i = 0; i < 100; i++) {
        yield* realSleep(50)
        retry = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "slow" }, idempotencyKey: "k-gone" })
        if (!(retry.status === 409 && retry.body?.error?.code === "idempotency_key_in_use")) break
      }
      // give a (wrong) second execution time to commit before counting
      for (let i = 0; i < 100 && (yield* sleeping) > 0; i++) yield* realSleep(20)
      expect(yield* count("service_actors", sb.tenantId, { column: "name", value: "slow" })).toBe(1)
      expect(retry!.status).toBe(201)
      expect(replayed(retry!)).toBe("true")
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: long requests", () => {
  it.live("a long request keeps its key while it works: a retry meanwhile is 409 in_use, never a second execution", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`
        CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.name = 'slow' THEN PERFORM pg_sleep(2.5); END IF;
          RETURN NEW;
        END $$`).pipe(Effect.orDie)
      yield* sql.unsafe(`CREATE TRIGGER test_slow BEFORE INSERT ON service_actors
                         FOR EACH ROW EXECUTE FUNCTION test_slow_insert()`).pipe(Effect.orDie)
      const send = request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "slow" }, idempotencyKey: "k-long" })
      const original = yield* Effect.fork(send)
      // the holder's transaction holds the key as long as it works
      yield* realSleep(1500)
      const mid = yield* send
      expectFreshError(mid, 409, "idempotency_key_in_use")
      const first = yield* Fiber.join(original)
      expect(first.status).toBe(201)
      expectReplayOf(yield* send, first)
      expect(yield* count("service_actors", sb.tenantId, { column: "name", value: "slow" })).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))
})
