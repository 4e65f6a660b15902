/**
 * Cells over real HTTP (contract part 8, D3, D4): one cell per tenant/environment, 60 requests/s
 * with a burst of 120, its durable generation, and idle cells stopping and being restored.
 *
 * The rate-limit tests build the app inside the test effect, after `TestClock.setTime`, so the
 * server (and every cell's limiter) reads the TestClock: time only moves when the test moves it.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Exit, Fiber, Layer, Scope, TestClock } from "effect"
import { Cells } from "../src/Cells/Cells.js"
import type { AppConfigShape } from "../src/Config/AppConfig.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { cli } from "./support/Cli.js"
import { createKey, operator, provisionSandbox, type Reply, request, type Sandbox } from "./support/Client.js"
import { freshDatabase, pg } from "./support/Database.js"
import { canConnect } from "./support/Server.js"

/** One emission interval at 60 requests/second. */
const EMISSION_MS = 1000 / 60
const BURST = 120
const POLICY = "\"burst\";q=120;w=2"

/** Runs `body` against a fresh app built under the TestClock, frozen at the wall-clock time. */
const underTestClock = <A, E, R>(body: Effect.Effect<A, E, R>, overrides: Partial<AppConfigShape> = {}) =>
  Effect.gen(function*() {
    yield* TestClock.setTime(Date.now())
    return yield* body.pipe(Effect.provide(makeTestApp(overrides)))
  })

/** A cheap authenticated `/v1` request (the quickstart key and `tenants:read` keys may list tenants). */
const list = (key: string) => request("GET", "/v1/tenants", { key })

/** `RateLimit: "burst";r=<remaining>;t=<reset>` */
const rateLimitState = (res: Reply) => {
  const value = res.headers.get("ratelimit")
  const match = value?.match(/^"burst";r=(\d+);t=(\d+)$/)
  if (!match) throw new Error(`malformed RateLimit header: ${value}`)
  return { remaining: Number(match[1]), reset: Number(match[2]) }
}

const expectAllowed = (res: Reply, what: string) => {
  if (res.status !== 200) throw new Error(`${what}: expected 200, got ${res.status} ${res.text}`)
  expect(res.headers.get("ratelimit-policy")).toBe(POLICY)
}

const expectRateLimited = (res: Reply) => {
  expect(res.status, res.text).toBe(429)
  // D3 envelope: exactly error + request_id, request_id = X-Request-Id.
  expect(Object.keys(res.body).sort()).toEqual(["error", "request_id"])
  expect(res.body.error.type).toBe("rate_limited")
  expect(res.body.error.code).toBe("rate_limited")
  expect(typeof res.body.error.message).toBe("string")
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
  // D4: Retry-After in whole seconds, and the rate-limit state.
  const retryAfter = res.headers.get("retry-after")
  expect(retryAfter).toMatch(/^\d+$/)
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
  expect(res.headers.get("ratelimit-policy")).toBe(POLICY)
  expect(rateLimitState(res).remaining).toBe(0)
  expect(res.headers.get("cache-control")).toBe("no-store")
}

/** Sends `count` requests with `keys` in turn, each of which must be allowed. */
const spend = (keys: ReadonlyArray<string>, count: number) =>
  Effect.gen(function*() {
    const replies: Array<Reply> = []
    for (let i = 0; i < count; i++) {
      const res = yield* list(keys[i % keys.length]!)
      expectAllowed(res, `request ${i + 1} of ${count}`)
      replies.push(res)
    }
    return replies
  })

const generationOf = (tenantId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ cell_generation: number }>`
        SELECT cell_generation FROM environments WHERE tenant_id = ${tenantId} AND name = 'sandbox'`
  ).pipe(Effect.map((rows) => rows[0]!.cell_generation))

/** Lets the server's fibers run (real time; the TestClock does not move). */
const settle = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 10)))

describe("cells: rate limit (60 rps, burst 120) over HTTP", () => {
  it.effect("the 120th request is allowed, the 121st is 429; time refills one emission interval at a time", () =>
    underTestClock(Effect.gen(function*() {
      const sb = yield* provisionSandbox()

      const replies = yield* spend([sb.key], BURST)
      expect(rateLimitState(replies[0]!)).toEqual({ remaining: BURST - 1, reset: 1 })
      expect(rateLimitState(replies[BURST - 1]!)).toEqual({ remaining: 0, reset: 2 })

      const refused = yield* list(sb.key)
      expectRateLimited(refused)
      expect(Number(refused.headers.get("retry-after"))).toBe(1) // one interval (16.7 ms), rounded up
      // A refused request spends nothing, and the clock has not moved: still refused.
      expectRateLimited(yield* list(sb.key))

      // One emission interval later exactly one more request is allowed.
      yield* TestClock.adjust(Duration.millis(EMISSION_MS))
      const one = yield* list(sb.key)
      expectAllowed(one, "after one emission interval")
      expect(rateLimitState(one).remaining).toBe(0)
      expectRateLimited(yield* list(sb.key))

      // After 2 s (burst / rate) the whole burst is available again, and no more.
      yield* TestClock.adjust(Duration.seconds(2))
      const again = yield* spend([sb.key], BURST)
      expect(rateLimitState(again[0]!).remaining).toBe(BURST - 1)
      expectRateLimited(yield* list(sb.key))
    })))

  it.effect("cells are per tenant/environment: exhausting tenant A's cell does not limit tenant B", () =>
    underTestClock(Effect.gen(function*() {
      const a = yield* provisionSandbox(undefined, "Tenant A")
      const b = yield* provisionSandbox(undefined, "Tenant B")
      expect(a.tenantId).not.toBe(b.tenantId)

      yield* spend([a.key], BURST)
      expectRateLimited(yield* list(a.key))

      const fromB = yield* list(b.key)
      expectAllowed(fromB, "tenant B")
      expect(rateLimitState(fromB).remaining).toBe(BURST - 1)
      expect(fromB.body.items.map((t: any) => t.id)).toEqual([b.tenantId])
      // B's traffic does not refill A either.
      expectRateLimited(yield* list(a.key))
    })))

  it.effect("two keys of one tenant/environment share the cell's limit", () =>
    underTestClock(Effect.gen(function*() {
      const sb: Sandbox = yield* provisionSandbox()
      const second = yield* createKey(sb.tenantId, ["tenants:read"], "second key")
      expect(second.secret).not.toBe(sb.key)

      // 60 requests each, interleaved: together they spend the one burst of 120.
      const replies = yield* spend([sb.key, second.secret], BURST)
      expect(replies.map((r) => rateLimitState(r).remaining)).toEqual(
        Array.from({ length: BURST }, (_, i) => BURST - 1 - i)
      )
      expectRateLimited(yield* list(sb.key))
      expectRateLimited(yield* list(second.secret))
    })))
})

describe("cells: generation and lifecycle", () => {
  it.live("the cell generation increments when the cell is restored in a new process", () =>
    Effect.gen(function*() {
      // Our own database, so it outlives both apps (makeTestApp with a url does not drop it).
      const db = yield* freshDatabase

      const sb = yield* Effect.gen(function*() {
        const sb = yield* provisionSandbox()
        expect(yield* generationOf(sb.tenantId)).toBe(0) // provisioning does not start the cell
        expectAllowed(yield* list(sb.key), "first process")
        expect(yield* generationOf(sb.tenantId)).toBe(1)
        expectAllowed(yield* list(sb.key), "first process, again")
        expect(yield* generationOf(sb.tenantId)).toBe(1) // same cell, same generation
        return sb
      }).pipe(Effect.provide(makeTestApp({}, db.url)))

      yield* Effect.gen(function*() {
        expect(yield* generationOf(sb.tenantId)).toBe(1) // not restored until used
        expectAllowed(yield* list(sb.key), "second process")
        expect(yield* generationOf(sb.tenantId)).toBe(2)
        expectAllowed(yield* list(sb.key), "second process, again")
        expect(yield* generationOf(sb.tenantId)).toBe(2)
      }).pipe(Effect.provide(makeTestApp({}, db.url)))
    }).pipe(Effect.scoped))

  it.live(
    "an idle cell is stopped by the cluster after CELL_IDLE_TIMEOUT_SECONDS (no command, not busy); the next request restores it",
    () =>
      Effect.gen(function*() {
        const cells = yield* Cells
        const sb = yield* provisionSandbox()
        expect(yield* cells.activeCount).toBe(0)

        expectAllowed(yield* list(sb.key), "first request")
        expect(yield* cells.activeCount).toBe(1)
        expect(yield* generationOf(sb.tenantId)).toBe(1)

        // In use (a request every 500 ms for 8 s, past the 2 s idle time and a pass of the
        // cluster's idle reaper, which looks every 5 s): still the same cell.
        for (let i = 0; i < 16; i++) {
          expectAllowed(yield* list(sb.key), `in use ${i}`)
          yield* Effect.sleep("500 millis")
        }
        expect(yield* cells.activeCount).toBe(1)
        expect(yield* generationOf(sb.tenantId)).toBe(1)

        // Idle: stopped within the idle time plus one reaper pass.
        let count = 1
        for (let i = 0; i < 150 && count !== 0; i++) {
          yield* Effect.sleep("100 millis")
          count = yield* cells.activeCount
        }
        expect(count).toBe(0)
        expect(yield* generationOf(sb.tenantId)).toBe(1) // stopping does not bump

        // The next request restores it, with a new generation and a fresh limiter.
        const restored = yield* list(sb.key)
        expectAllowed(restored, "after the idle stop")
        expect(rateLimitState(restored).remaining).toBe(BURST - 1)
        expect(yield* cells.activeCount).toBe(1)
        expect(yield* generationOf(sb.tenantId)).toBe(2)
      }).pipe(Effect.provide(makeTestApp({ cellIdleTimeoutSeconds: 2 }))),
    40_000
  )
})

describe("cells: the cluster (issue 19)", () => {
  it.live("GET /operator/v1/cluster: this node's runner, healthy, and the runner of each active cell; the CLI shows it; /readyz is 200 once joined", () =>
    Effect.gen(function*() {
      // Ready once the runner has joined: until then 503 not_ready.
      let ready = yield* request("GET", "/readyz")
      for (let i = 0; i < 300 && ready.status !== 200; i++) {
        expect(ready.body.error.code, ready.text).toBe("not_ready")
        yield* Effect.sleep("100 millis")
        ready = yield* request("GET", "/readyz")
      }
      expect(ready.status, ready.text).toBe(200)
      const a = yield* provisionSandbox()
      const b = yield* provisionSandbox()
      expectAllowed(yield* list(a.key), "cell a")
      expectAllowed(yield* list(b.key), "cell b")

      const view = yield* operator("GET", "/cluster")
      expect(view.status, view.text).toBe(200)
      expect(view.body.runners).toHaveLength(1)
      const [runner] = view.body.runners
      expect(runner.address).toMatch(/^127\.0\.0\.1:\d+$/)
      expect(runner).toMatchObject({ healthy: true, self: true })
      expect(Date.now() - Date.parse(runner.last_heartbeat)).toBeLessThan(30_000)
      const cells = view.body.cells.map((c: any) => [c.tenant_id, c.environment, c.runner, c.generation])
      expect(cells.sort()).toEqual([[a.tenantId, "sandbox", runner.address, 1], [b.tenantId, "sandbox", runner.address, 1]].sort())

      // Not on /v1, and not without the operator token.
      expect((yield* request("GET", "/operator/v1/cluster", { key: a.key })).status).toBe(401)

      const printed = yield* cli(["cluster", "--json"])
      expect(printed.code, printed.stderr).toBe(0)
      expect(JSON.parse(printed.stdout).runners[0].address).toBe(runner.address)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("cells: shutdown", () => {
  const connects = (port: number) => Effect.promise(() => canConnect(port))

  it.live(
    "a /v1 request in flight when the service stops is answered 503 cell_unavailable with Retry-After; then the stop completes",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        const scope = yield* Scope.make()
        const app = yield* Layer.buildWithScope(makeTestApp({}, db.url), scope)
        const { baseUrl } = Context.get(app, TestApp)
        const port = Number(new URL(baseUrl).port)
        const sb = yield* provisionSandbox().pipe(Effect.provide(app))

        // Another session holds api_keys: the request's key lookup waits, before it reaches the cell.
        const locker = new pg.Client({ connectionString: db.url })
        yield* Effect.acquireRelease(Effect.promise(() => locker.connect()), () => Effect.promise(() => locker.end()))
        yield* Effect.promise(() => locker.query("BEGIN; LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE"))
        const pending = Effect.runPromise(request("GET", "/v1/tenants", { key: sb.key }).pipe(Effect.provide(app)))
        let waiting = 0
        for (let i = 0; i < 500 && waiting === 0; i++) {
          yield* settle
          const rows = yield* Effect.promise(() =>
            locker.query(`SELECT count(*)::int AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock'`)
          )
          waiting = rows.rows[0]!.n as number
        }
        expect(waiting).toBe(1)

        // Stop the service (what SIGTERM does) while the request waits, before it reached its cell.
        const stopping = yield* Effect.fork(Scope.close(scope, Exit.void))
        for (let i = 0; i < 500 && (yield* connects(port)); i++) yield* settle
        expect(yield* connects(port)).toBe(false)

        yield* Effect.promise(() => locker.query("COMMIT"))
        const res = yield* Effect.promise(() => pending).pipe(Effect.timeout("10 seconds"))
        // The listener closes first. The request had not reached its cell, which this node no
        // longer runs: it is answered 503 `cell_unavailable` with Retry-After (a load balancer
        // retries it on another node), never a 500 or a dropped connection.
        expect(res.status, res.text).toBe(503)
        expect(res.body.error.type).toBe("unavailable")
        expect(res.body.error.code).toBe("cell_unavailable")
        expect(res.headers.get("retry-after")).toBe("2")
        const stopped = yield* Fiber.join(stopping).pipe(Effect.timeout("10 seconds"), Effect.either)
        expect(stopped._tag).toBe("Right")
        const generation = yield* Effect.promise(() =>
          locker.query(`SELECT cell_generation AS g FROM environments WHERE tenant_id = '${sb.tenantId}'`)
        )
        expect(generation.rows).toEqual([{ g: 0 }]) // no cell was started by the stopping node
      }).pipe(Effect.scoped),
    30_000
  )
})
