/**
 * A lost LISTEN connection (src/Database/Listener.ts) over HTTP: the run-event bus's connection is
 * terminated while an SSE stream follows a running run; the bus reconnects, the stream reads what
 * it may have missed, and it gets the run's remaining events and its end when they commit, not a
 * quiet ping interval (15 s) later. A `Prefer: wait` whose run ended while the connection was
 * down reads the run once LISTEN is back, instead of waiting out its time.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"

import { makeTestApp, TestApp } from "./support/App.js"
import { readSse } from "./support/Client.js"
import { admin, freshDatabase } from "./support/Database.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

describe("the run-event bus loses its LISTEN connection", () => {
  it.live("an open stream still gets the run's events and its end as they commit", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      yield* Effect.gen(function*() {
        const app = yield* TestApp
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 2 }, { type: "text", text: "done" }])
        const conv = yield* s.conversation()
        const run = (yield* s.startRun(conv.id, "x")).body.data
        const stream = yield* readSse(`${app.baseUrl}${s.P}/runs/${run.id}/events/stream`, { authorization: `Bearer ${s.key}` })
          .pipe(Effect.timed, Effect.fork)
        yield* eventually(s.getRun(run.id), (r) => r.status === "running")
        const terminated = yield* Effect.promise(() =>
          admin((c) =>
            c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db.name}' AND query LIKE 'LISTEN%'`)
          )
        )
        expect(terminated.rows).toHaveLength(1)
        const ended = yield* eventually(s.getRun(run.id), (r) => isTerminal(r.status))
        expect(ended.status).toBe("succeeded")
        const endedAt = Date.now()
        const [, sse] = yield* Fiber.join(stream)
        expect(sse.status).toBe(200)
        expect(sse.frames.map((f) => f.event)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
        // the end came with the commit, not a quiet interval later
        expect(Date.now() - endedAt).toBeLessThan(3_000)
      }).pipe(Effect.provide(makeTestApp({}, db.url)))
    }).pipe(Effect.scoped), 60_000)

  it.live("a Prefer: wait whose run ended while the connection was down answers once LISTEN is back", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      yield* Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 1 }, { type: "text", text: "done" }])
        const conv = yield* s.conversation()
        const waited = yield* s.startRun(conv.id, "x", { headers: { prefer: "wait=10" } }).pipe(Effect.timed, Effect.fork)
        yield* Effect.sleep(Duration.millis(300)) // the run sleeps (1 s)
        const sql = (text: string) => Effect.promise(() => admin((c) => c.query(text)))
        yield* sql(`ALTER DATABASE ${db.name} WITH ALLOW_CONNECTIONS false`)
        const terminated = yield* sql(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db.name}' AND query LIKE 'LISTEN%'`
        )
        expect(terminated.rows).toHaveLength(1)
        yield* Effect.sleep(Duration.millis(1500)) // the run ends meanwhile; its notification reaches nobody here
        yield* sql(`ALTER DATABASE ${db.name} WITH ALLOW_CONNECTIONS true`)
        const [took, res] = yield* Fiber.join(waited)
        expect(res.status, res.text).toBe(200)
        expect(res.body.data).toMatchObject({ status: "succeeded", output: [{ type: "text", text: "done" }] })
        // once LISTEN is back (its backoff was at 1.6 s), not at the end of the 10 s wait
        expect(Duration.toMillis(took)).toBeLessThan(7_000)
      }).pipe(Effect.provide(makeTestApp({}, db.url)))
    }).pipe(Effect.scoped), 60_000)
})
