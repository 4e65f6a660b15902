/**
 * Prometheus metrics at `GET /metrics` (issue 15, deliverable 4): the operator token guards it,
 * the text format, and a scripted run moving the counters (request counts and latency of
 * `createRun`, the run's transitions and events). Effect's metrics are global to the process, so
 * the test compares two scrapes, never absolute values.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Logger, LogLevel, Metric, MetricBoundaries } from "effect"
import { operationOf } from "../src/Edge/Metrics.js"
import { render } from "../src/Observability/Prometheus.js"
import { makeTestApp, OPERATOR_TOKEN, TestApp } from "./support/App.js"
import { provisionSandbox, readSse, request } from "./support/Client.js"
import { pg } from "./support/Database.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually, realSleep } from "./support/Waiting.js"

const scrape = Effect.map(request("GET", "/metrics", { key: OPERATOR_TOKEN }), (r) => {
  expect(r.status, r.text).toBe(200)
  return r.text
})

/** The value of the sample `name{labels}` (labels in any order), 0 when absent. */
const sample = (text: string, name: string, labels: Record<string, string> = {}) => {
  let total = 0
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (m === null || m[1] !== name) continue
    const have = Object.fromEntries([...(m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]))
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) total += Number(m[3])
  }
  return total
}

describe("metrics", () => {
  it("operations are the HttpApi endpoints' names, never raw paths", () => {
    expect(operationOf("POST", "/v1/tenants/ten_1/environments/sandbox/conversations/conv_1/runs").operation).toBe("createRun")
    expect(operationOf("GET", "/v1/tenants/ten_1/environments/sandbox/runs/run_1?x=1")).toEqual({
      operation: "getRun",
      params: { tenant_id: "ten_1", environment: "sandbox", run_id: "run_1" }
    })
    expect(operationOf("HEAD", "/healthz").operation).toBe("healthz")
    expect(operationOf("GET", "/metrics").operation).toBe("metrics")
    expect(operationOf("GET", "/v1/tenants/ten_1/nothing/here").operation).toBe("unmatched")
    expect(operationOf("BREW", "/healthz").operation).toBe("unmatched")
    expect(operationOf("GET", "/console/sign-in?next=x").operation).toBe("console")
    expect(operationOf("GET", "/operator/console/pilots").operation).toBe("operator_console")
  })

  it.effect("renders counters, gauges and cumulative histogram buckets with escaped labels", () =>
    Effect.gen(function*() {
      const counter = Metric.counter("test_render_total", { description: "a counter" })
      yield* Metric.increment(Metric.tagged(counter, "path", "a\"b\\c"))
      yield* Metric.set(Metric.gauge("test_render_gauge"), 3)
      const histogram = Metric.histogram("test_render_seconds", MetricBoundaries.fromIterable([1, 2]))
      for (const v of [0.5, 1.5, 1.5, 9]) yield* Metric.update(histogram, v)
      const pairs = (yield* Metric.snapshot).filter((p) => p.metricKey.name.startsWith("test_render"))
      expect(render(pairs)).toBe([
        "# TYPE test_render_gauge gauge",
        "test_render_gauge 3",
        "# TYPE test_render_seconds histogram",
        "test_render_seconds_bucket{le=\"1\"} 1",
        "test_render_seconds_bucket{le=\"2\"} 3",
        "test_render_seconds_bucket{le=\"+Inf\"} 4",
        "test_render_seconds_sum 12.5",
        "test_render_seconds_count 4",
        "# HELP test_render_total a counter",
        "# TYPE test_render_total counter",
        "test_render_total{path=\"a\\\"b\\\\c\"} 1",
        ""
      ].join("\n"))
    }))

  it.live("/metrics needs the operator token; a scripted run moves the counters", () =>
    Effect.gen(function*() {
      const anonymous = yield* request("GET", "/metrics")
      expect(anonymous.status).toBe(401)
      expectErrorCode(anonymous, 401, "invalid_operator_token")
      const wrong = yield* request("GET", "/metrics", { key: "op_wrong" })
      expectErrorCode(wrong, 401, "invalid_operator_token")

      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 1 }, { type: "text", text: "You said: {{input}}" }])
      const conv = yield* s.conversation()
      const first = yield* request("GET", "/metrics", { key: OPERATOR_TOKEN })
      expect(first.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/)
      const before = first.text
      expect(before).toMatch(/^# TYPE http_requests_total counter$/m)
      expect(before).toMatch(/^# TYPE http_request_duration_seconds histogram$/m)

      const accepted = expectSingle(yield* s.startRun(conv.id, "hello"), 202)
      // Followed on an SSE stream: the events that arrive while it is open (at least the last,
      // after the model's 1 s) have their lag from the commit measured; the history it starts with not.
      const app = yield* TestApp
      const streamed = yield* readSse(`${app.baseUrl}${s.P}/runs/${accepted.id}/events/stream`, {
        authorization: `Bearer ${s.key}`,
        accept: "text/event-stream"
      })
      expect(streamed.frames.map((f) => f.event)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
      const run = yield* eventually(s.getRun(accepted.id), (r) => isTerminal(r.status))
      expect(run.status).toBe("succeeded")
      const after = yield* scrape

      const created = { operation: "createRun", method: "POST", status: "202" }
      expect(sample(after, "http_requests_total", created) - sample(before, "http_requests_total", created)).toBe(1)
      const latency = { operation: "createRun", le: "+Inf" }
      expect(
        sample(after, "http_request_duration_seconds_bucket", latency) - sample(before, "http_request_duration_seconds_bucket", latency)
      )
        .toBe(1)
      expect(after).toMatch(/^http_request_duration_seconds_bucket\{operation="createRun",le="0\.005"\} \d+$/m)
      expect(sample(after, "http_request_duration_seconds_count", { operation: "createRun" })).toBeGreaterThan(0)

      const delta = (name: string, labels: Record<string, string>) => sample(after, name, labels) - sample(before, name, labels)
      expect(delta("run_transitions_total", { from: "none", to: "queued" })).toBeGreaterThanOrEqual(1)
      expect(delta("run_transitions_total", { from: "queued", to: "running" })).toBeGreaterThanOrEqual(1)
      expect(delta("run_transitions_total", { from: "running", to: "succeeded" })).toBeGreaterThanOrEqual(1)
      expect(delta("run_events_total", { type: "run.succeeded" })).toBeGreaterThanOrEqual(1)
      expect(delta("run_events_total", { type: "run.message" })).toBeGreaterThanOrEqual(1)
      const lagged = delta("event_stream_lag_seconds_count", {})
      expect(lagged).toBeGreaterThanOrEqual(1)
      expect(lagged).toBeLessThanOrEqual(3) // run.queued was history when the stream opened
      expect(sample(after, "cells_active")).toBeGreaterThanOrEqual(1)
      expect(after).toMatch(/^# TYPE run_actors_active gauge$/m)
      // no raw path with ids as a label
      expect(after).not.toContain(accepted.id)
      expect(after).not.toContain(s.tenantId)
    }).pipe(Effect.provide(makeTestApp())), 20_000)

  it.live("a blocked event loop shows at the next scrape, and only at that one", () =>
    Effect.gen(function*() {
      yield* scrape // starts the delays over
      // the service runs in this process: blocking this loop blocks its
      const until = performance.now() + 1200
      while (performance.now() < until) {
        // busy
      }
      // the block is taken when the timers fire after it: a scrape served in the same turn of the
      // loop would come first (the block then shows at the scrape after)
      yield* Effect.sleep("300 millis")
      const blocked = yield* scrape
      expect(sample(blocked, "nodejs_eventloop_delay_max_seconds")).toBeGreaterThanOrEqual(1.1)
      expect(sample(blocked, "nodejs_eventloop_delay_p99_seconds")).toBeGreaterThan(0)
      const next = yield* scrape
      expect(sample(next, "nodejs_eventloop_delay_max_seconds")).toBeLessThan(1)
    }).pipe(Effect.provide(makeTestApp())), 20_000)

  it.live("the database pool's gauges are read from the pool at each scrape", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const idle = yield* scrape
      expect(sample(idle, "db_pool_max_connections")).toBe(5) // the test app's DB_POOL_SIZE
      expect(idle).toMatch(/^# TYPE db_pool_waiting_requests gauge$/m)
      const inUse = (text: string) => sample(text, "db_pool_connections", { state: "in_use" })
      // Six transactions held open on a pool of five: five connections lent, one waits for one.
      const release = yield* Deferred.make<void>()
      const held = yield* Effect.forkDaemon(
        Effect.all(Array.from({ length: 6 }, () => sql.withTransaction(Deferred.await(release))), { concurrency: "unbounded" })
      )
      const busy = yield* eventually(scrape, (text) => sample(text, "db_pool_waiting_requests") >= 1)
      expect(inUse(busy)).toBe(5)
      expect(sample(busy, "db_pool_connections", { state: "idle" })).toBe(0)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(held)
      // Released: the gauges drop (the cluster runner's own connection, which holds its shard locks,
      // and its polls stay in use, so "fewer than five" is read at a scrape after the release).
      const after = yield* eventually(scrape, (text) => sample(text, "db_pool_waiting_requests") === 0 && inUse(text) < 5)
      expect(sample(after, "db_pool_waiting_requests")).toBe(0)
      expect(inUse(after)).toBeLessThan(5)
    }).pipe(Effect.provide(makeTestApp())), 20_000)

  it.live("a client that goes away mid-request counts as 499 and logs no error", () => {
    const lines: Array<string> = []
    return Effect.gen(function*() {
      const sb = yield* provisionSandbox(["users:read"])
      const app = yield* TestApp
      const sql = yield* SqlClient.SqlClient
      const labels = (status: string) => ({ operation: operationOf("GET", `${sb.P}/users`).operation, method: "GET", status })
      const before = yield* scrape
      // The list's read waits on a lock held here: the request is inside its handler when its client goes.
      const locker = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new pg.Client({ connectionString: app.databaseUrl })
          await client.connect()
          return client
        }),
        (client) => Effect.promise(() => client.end())
      )
      yield* Effect.promise(() => locker.query("BEGIN; LOCK TABLE users IN ACCESS EXCLUSIVE MODE"))
      const controller = new AbortController()
      const call = fetch(`${app.baseUrl}${sb.P}/users`, {
        headers: { authorization: `Bearer ${sb.key}` },
        signal: controller.signal
      }).then(() => "answered", () => "aborted")
      // (another session: a transaction sees one snapshot of pg_stat_activity)
      const waiting = sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                                         WHERE datname = current_database() AND wait_event_type = 'Lock'
                                           AND query LIKE '%FROM users%'`.pipe(Effect.orDie, Effect.map((rows) => rows[0]!.n))
      expect(yield* eventually(waiting, (n) => n === 1)).toBe(1)
      controller.abort()
      expect(yield* Effect.promise(() => call)).toBe("aborted")
      yield* realSleep(50)
      yield* Effect.promise(() => locker.query("COMMIT"))

      const after = yield* eventually(
        scrape,
        (text) => sample(text, "http_requests_total", labels("499")) > sample(before, "http_requests_total", labels("499"))
      )
      expect(sample(after, "http_requests_total", labels("499")) - sample(before, "http_requests_total", labels("499"))).toBe(1)
      expect(sample(after, "http_requests_total", labels("500")) - sample(before, "http_requests_total", labels("500"))).toBe(0)
      expect(lines.filter((l) => l.includes("level=ERROR"))).toEqual([])
      expect(lines.some((l) => l.includes("client went away"))).toBe(true)
    }).pipe(
      Effect.scoped,
      Effect.provide(makeTestApp()),
      Effect.provide(Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, (line) => void lines.push(line)))),
      Logger.withMinimumLogLevel(LogLevel.All)
    )
  })
})
