/**
 * LISTEN on a connection that notices when it is gone (src/Database/Listener.ts), on a real
 * Postgres: a terminated backend and a connection that stops answering (a TCP proxy that stops
 * forwarding: a half-open connection) are both replaced, every listener is told `Listening` once
 * LISTEN is active again, and later notifications arrive. `@effect/sql-pg`'s own `listen` stays
 * silent forever after its backend is terminated (neither a notification nor a failure).
 */
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer, Redacted, Stream } from "effect"
import * as net from "node:net"

import * as Listener from "../src/Database/Listener.js"
import { admin, freshDatabase, pg } from "./support/Database.js"

const notify = (url: string, channel: string, payload: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await client.query(`NOTIFY ${channel}, '${payload}'`)
    } finally {
      await client.end()
    }
  })

/** Until `check` holds (every 20 ms, at most `ms`). */
const eventually = (check: () => boolean, ms = 10_000) =>
  Effect.promise(async () => {
    const until = Date.now() + ms
    while (!check() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20))
  })

/** What a listener of `channel` got: "listening" for each `Listening`, else the payload. */
const follow = (notifications: Listener.Notifications["Type"], channel: string) =>
  Effect.gen(function*() {
    const got: Array<string> = []
    yield* notifications.listen(channel).pipe(
      Stream.runForEach((n) => Effect.sync(() => got.push(n._tag === "Listening" ? "listening" : n.payload))),
      Effect.forkScoped
    )
    return got
  })

/**
 * A TCP proxy to Postgres whose open connections can be made to stop forwarding (new ones still
 * work); its first `silent` connections are accepted and never answered.
 */
const proxy = (target: URL, silent = 0) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const pairs: Array<[net.Socket, net.Socket]> = []
      const unanswered: Array<net.Socket> = []
      const server = net.createServer((client) => {
        if (unanswered.length < silent) {
          client.on("error", () => undefined)
          return void unanswered.push(client)
        }
        const upstream = net.connect(Number(target.port), target.hostname)
        client.on("error", () => undefined)
        upstream.on("error", () => undefined)
        client.pipe(upstream)
        upstream.pipe(client)
        pairs.push([client, upstream])
      })
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const freeze = () => {
        for (const [client, upstream] of pairs) {
          client.unpipe(upstream)
          upstream.unpipe(client)
          client.pause()
          upstream.pause()
        }
      }
      const close = () => {
        for (const client of unanswered) client.destroy()
        for (const [client, upstream] of pairs) {
          client.destroy()
          upstream.destroy()
        }
        return new Promise<void>((resolve) => server.close(() => resolve()))
      }
      const url = new URL(target)
      url.hostname = "127.0.0.1"
      url.port = String((server.address() as net.AddressInfo).port)
      return { url: url.toString(), freeze, close }
    }),
    (p) => Effect.promise(p.close)
  )

/** A fresh database and a listener on it that is probed once a minute. */
const listening = Effect.gen(function*() {
  const db = yield* freshDatabase
  const notifications = yield* Listener.make({ url: Redacted.make(db.url), probeMillis: 60_000, probeTimeoutMillis: 5_000 })
  return { db, notifications }
})

describe("the LISTEN connection", () => {
  // First in its file (a process of its own): pg warns of this once per process.
  it.live("its statements go one at a time: many channels at once and a probe every 10 ms never make pg queue one", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const onWarning = (w: Error) => void warnings.push(w.message)
      yield* Effect.acquireRelease(
        Effect.sync(() => process.on("warning", onWarning)),
        () => Effect.sync(() => process.off("warning", onWarning))
      )
      const db = yield* freshDatabase
      const notifications = yield* Listener.make({ url: Redacted.make(db.url), probeMillis: 10, probeTimeoutMillis: 5_000 })
      const first = yield* follow(notifications, "c0")
      yield* eventually(() => first.includes("listening"))
      // the connection is live: these LISTENs are sent at once, between probes
      const channels = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"]
      const got = yield* Effect.forEach(channels, (c) => follow(notifications, c))
      yield* eventually(() => got.every((g) => g.includes("listening")))
      for (const c of channels) yield* notify(db.url, c, `to-${c}`)
      yield* eventually(() => got.every((g) => g.length === 2))
      expect(got).toEqual(channels.map((c) => ["listening", `to-${c}`]))
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))
      expect(warnings.filter((w) => w.includes("already executing a query"))).toEqual([])
    }).pipe(Effect.scoped))

  it.live(
    "a terminated backend is replaced: the listener is told Listening again, and later notifications arrive",
    () =>
      Effect.gen(function*() {
        const { db, notifications } = yield* listening
        const got = yield* follow(notifications, "zz")
        yield* eventually(() => got.includes("listening"))
        yield* notify(db.url, "zz", "one")
        yield* eventually(() => got.includes("one"))
        expect(got).toEqual(["listening", "one"])

        const terminated = yield* Effect.promise(() =>
          admin((c) =>
            c.query(
              `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db.name}' AND application_name = 'agent-platform-listen'`
            )
          )
        )
        expect(terminated.rows).toHaveLength(1)
        yield* eventually(() => got.length === 3)
        expect(got).toEqual(["listening", "one", "listening"])
        expect(notifications.connections()).toBe(2)
        yield* notify(db.url, "zz", "two")
        yield* eventually(() => got.includes("two"))
        expect(got).toEqual(["listening", "one", "listening", "two"])
      }).pipe(Effect.scoped),
    30_000
  )

  it.live("a connection that stops answering is replaced after a failed probe", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const p = yield* proxy(new URL(db.url))
      const notifications = yield* Listener.make({
        url: Redacted.make(p.url),
        probeMillis: 200,
        probeTimeoutMillis: 300
      })
      const got = yield* follow(notifications, "zz")
      yield* eventually(() => got.includes("listening"))
      p.freeze()
      yield* notify(db.url, "zz", "lost") // sent while the connection forwards nothing
      yield* eventually(() => got.filter((g) => g === "listening").length === 2)
      expect(got).toEqual(["listening", "listening"])
      expect(notifications.connections()).toBe(2)
      yield* notify(db.url, "zz", "after")
      yield* eventually(() => got.includes("after"))
      expect(got).toEqual(["listening", "listening", "after"])
    }).pipe(Effect.scoped), 30_000)

  it.live(
    "a connection that never answers its start is given up after the timeout, and the next one listens",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        const p = yield* proxy(new URL(db.url), 1)
        const notifications = yield* Listener.make({ url: Redacted.make(p.url), probeMillis: 60_000, probeTimeoutMillis: 300 })
        const got = yield* follow(notifications, "zz")
        yield* eventually(() => got.includes("listening"), 5_000)
        expect(got).toEqual(["listening"])
        expect(notifications.connections()).toBe(1) // the silent one never connected
        yield* notify(db.url, "zz", "one")
        yield* eventually(() => got.includes("one"))
        expect(got).toEqual(["listening", "one"])
      }).pipe(Effect.scoped),
    30_000
  )

  it.live(
    "a listener that comes later is told Listening once its channel is listened to; another channel's notices are not its",
    () =>
      Effect.gen(function*() {
        const { db, notifications } = yield* listening
        const first = yield* follow(notifications, "aa")
        yield* eventually(() => first.includes("listening"))
        const second = yield* follow(notifications, "bb")
        yield* eventually(() => second.includes("listening"))
        yield* notify(db.url, "bb", "for-bb")
        yield* notify(db.url, "aa", "for-aa")
        yield* eventually(() => first.includes("for-aa") && second.includes("for-bb"))
        expect(first).toEqual(["listening", "for-aa"])
        expect(second).toEqual(["listening", "for-bb"])
        expect(notifications.connections()).toBe(1)
      }).pipe(Effect.scoped),
    30_000
  )

  it.live("@effect/sql-pg's listen, by contrast, stays silent after its backend is terminated", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = Context.get(yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 })), PgClient.PgClient)
      const got: Array<string> = []
      const fiber = yield* client.listen("zz").pipe(Stream.runForEach((p) => Effect.sync(() => got.push(p))), Effect.fork)
      yield* Effect.sleep(300)
      yield* Effect.promise(() =>
        admin((c) =>
          c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db.name}' AND query LIKE 'LISTEN%'`)
        )
      )
      yield* Effect.sleep(500)
      yield* notify(db.url, "zz", "two")
      yield* Effect.sleep(1000)
      expect(got).toEqual([])
      expect(yield* Fiber.poll(fiber)).toEqual(expect.objectContaining({ _tag: "None" }))
    }).pipe(Effect.scoped), 30_000)
})
