/**
 * An SSE stream's logic (src/Runs/Stream.ts) against an in-memory hub: whatever the order of
 * commits, lost notifications (and the bus's word that some were missed), slow reads and ticks, the
 * client gets every event once and in order, then the end; an idle stream reads nothing; a revoked key or a client gone ends it and lets go of the bus and the slot.
 * Over HTTP, the streams are tested in Runs.Access, Runs.LiveClock and Hardening.Access.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import fc from "fast-check"

import type { Principal } from "../src/Kernel/Principal.js"
import type { BusListener } from "../src/Runs/EventBus.js"
import type { EventRow } from "../src/Runs/RunStore.js"
import { EventStream, type Hub } from "../src/Runs/Stream.js"

const principal: Principal = {
  keyId: "key_1",
  tenantId: "ten_1",
  environment: "sandbox",
  scopes: ["runs:read"],
  kind: "console",
  actor: { type: "api_key", id: "key_1" }
}

const PING_MS = 1000
const CHECK_MS = 5000

const world = () => {
  const db: Array<EventRow> = []
  const listeners = new Set<BusListener>()
  const reads = { count: 0 }
  const closed: Array<EventStream> = []
  const fibers: Array<Fiber.RuntimeFiber<void, unknown>> = []
  const clock = { now: 0, active: true }
  const hub: Hub = {
    fork: (effect) => void fibers.push(Effect.runFork(effect)),
    now: () => clock.now,
    pingMs: PING_MS,
    checkMs: CHECK_MS,
    // a database read answers later, as a real one does
    eventsAfter: (_runId, after) =>
      Effect.promise(() => {
        reads.count++
        return new Promise((resolve) => setImmediate(() => resolve(db.filter((e) => e.sequence > after))))
      }),
    // a key check answers later, as the hub's does
    checkKey: (stream) =>
      void fibers.push(
        Effect.runFork(Effect.promise(() => new Promise<void>((resolve) => setImmediate(() => resolve(stream.checked(clock.active))))))
      ),
    listen: (_runId, listener) => {
      listeners.add(listener)
      return () => void listeners.delete(listener)
    },
    closed: (stream) => void closed.push(stream),
    lag: () => undefined
  }
  const commit = (type: EventRow["type"], notify: boolean) => {
    const sequence = db.length + 1
    const row: EventRow = { id: `evt_${sequence}`, run_id: "run_1", sequence, type, data: { n: sequence }, created_at: new Date(0) }
    db.push(row)
    if (notify) { for (const listener of [...listeners]) listener.row({ ...row }) }
  }
  /** The bus's LISTEN connection was replaced: notifications may have been lost. */
  const missed = () => {
    for (const listener of [...listeners]) listener.missed()
  }
  /** Until no fiber of the stream is left running. */
  const settle = async () => {
    for (let i = 0; i < 100; i++) {
      await new Promise((resolve) => setImmediate(resolve))
      const running = fibers.splice(0)
      if (running.length === 0) return
      await Promise.all(running.map((f) => Effect.runPromise(Fiber.await(f))))
    }
  }
  return { db, listeners, reads, closed, clock, hub, commit, missed, settle }
}

/** What the client read so far: event ids in order, pings, whether the body ended. */
const reader = (stream: EventStream) => {
  const seen = { ids: [] as Array<string>, pings: 0, ended: false, text: "" }
  stream.body.on("end", () => (seen.ended = true))
  const read = (chunks: number) => {
    for (let i = 0; i < chunks; i++) {
      const chunk = stream.body.read()
      if (chunk === null) break
      seen.text += chunk.toString()
    }
    const frames = seen.text.split("\n\n")
    seen.text = frames.pop()!
    for (const f of frames) {
      if (f === ": ping") seen.pings++
      else seen.ids.push(/^id: (.*)$/m.exec(f)![1]!)
    }
  }
  return { seen, read }
}

/** A stream the client started reading, its history read; `before` events were committed first. */
const opened = async (before = 0, after = 0) => {
  const w = world()
  for (let i = 0; i < before; i++) w.commit("run.message", false)
  const stream = new EventStream(w.hub, principal, "run_1", after, undefined)
  const client = reader(stream)
  client.read(1)
  await w.settle()
  return { w, stream, client }
}

type Action =
  | { readonly _tag: "commit"; readonly count: number; readonly notify: boolean }
  | { readonly _tag: "read"; readonly chunks: number }
  | { readonly _tag: "tick"; readonly ms: number }
  | { readonly _tag: "settle" }
  | { readonly _tag: "missed" }

const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ _tag: fc.constant("commit" as const), count: fc.integer({ min: 1, max: 6 }), notify: fc.boolean() }),
  fc.record({ _tag: fc.constant("commit" as const), count: fc.integer({ min: 1, max: 6 }), notify: fc.constant(true) }),
  fc.record({ _tag: fc.constant("read" as const), chunks: fc.integer({ min: 0, max: 4 }) }),
  fc.record({ _tag: fc.constant("tick" as const), ms: fc.integer({ min: 0, max: 1500 }) }),
  fc.constant({ _tag: "settle" as const }),
  fc.constant({ _tag: "missed" as const })
)

describe("an SSE stream's logic", () => {
  it("every event once and in order, then the end, whatever the commits, lost notifications, missed words, slow reads and ticks", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { maxLength: 40 }), fc.integer({ min: 0, max: 3 }), fc.boolean(), async (actions, before, tiny) => {
        const w = world()
        for (let i = 0; i < before; i++) w.commit("run.message", false)
        // a tiny buffer makes the stream pause and read the rest from the database
        const stream = new EventStream(w.hub, principal, "run_1", 0, tiny ? 64 : undefined)
        const client = reader(stream)
        client.read(1) // the response starts reading
        for (const a of actions) {
          if (a._tag === "commit") { for (let i = 0; i < a.count; i++) w.commit("run.message", a.notify) }
          else if (a._tag === "read") client.read(a.chunks)
          else if (a._tag === "tick") {
            w.clock.now += a.ms
            stream.tick(w.clock.now)
          } else if (a._tag === "missed") w.missed()
          else await w.settle()
        }
        w.commit("run.succeeded", true)
        for (let i = 0; i < 50 && !client.seen.ended; i++) {
          await w.settle()
          client.read(1000)
          w.clock.now += PING_MS
          stream.tick(w.clock.now)
        }
        expect(client.seen.ended).toBe(true)
        expect(client.seen.ids).toEqual(w.db.map((e) => e.id))
        expect(w.closed).toEqual([stream])
        expect(w.listeners.size).toBe(0)
      }),
      { numRuns: 300 }
    )
  })

  it("a stream starting after a sequence sends only the events after it", async () => {
    const { client, w } = await opened(3, 2)
    w.commit("run.failed", true)
    await w.settle()
    client.read(10)
    expect(client.seen.ids).toEqual(["evt_3", "evt_4"])
  })

  it("pings while idle, never later than the ping interval", async () => {
    const { client, stream, w } = await opened()
    const at: Array<number> = []
    for (let ms = 250; ms <= 6000; ms += 250) {
      w.clock.now = ms
      stream.tick(ms)
      await w.settle()
      const before = client.seen.pings
      client.read(100)
      if (client.seen.pings > before) at.push(ms)
    }
    const gaps = at.map((t, i) => t - (i === 0 ? 0 : at[i - 1]!))
    expect(gaps.length).toBeGreaterThanOrEqual(6)
    for (const gap of gaps) {
      expect(gap).toBeLessThanOrEqual(PING_MS)
      expect(gap).toBeGreaterThanOrEqual(PING_MS / 2)
    }
    expect(client.seen.ids).toEqual([])
  })

  it("an event committed during a key check is sent when the check is over, not a quiet interval later", async () => {
    const { client, stream, w } = await opened()
    w.clock.now = CHECK_MS
    stream.tick(w.clock.now) // the key check starts; it answers later
    w.commit("run.message", true)
    await w.settle()
    client.read(100)
    expect(client.seen.ids).toEqual(["evt_1"])
  })

  it("an idle stream reads nothing; an event whose notification was lost is read when the bus says some were missed", async () => {
    const { client, stream, w } = await opened(1)
    client.read(10)
    expect(client.seen.ids).toEqual(["evt_1"])
    const afterHistory = w.reads.count
    w.commit("run.message", false) // its notification is lost
    for (let ms = 250; ms <= 4 * PING_MS; ms += 250) {
      w.clock.now = ms
      stream.tick(ms)
      await w.settle()
    }
    client.read(100)
    expect(w.reads.count).toBe(afterHistory)
    expect(client.seen.ids).toEqual(["evt_1"])
    w.missed() // LISTEN was replaced
    await w.settle()
    client.read(100)
    expect(client.seen.ids).toEqual(["evt_1", "evt_2"])
    expect(w.reads.count).toBe(afterHistory + 1)
  })

  it("a revoked key ends the stream at its next check; the bus and the slot are let go", async () => {
    const { client, stream, w } = await opened()
    w.clock.active = false
    w.clock.now = CHECK_MS - 1
    stream.tick(w.clock.now)
    await w.settle()
    client.read(100)
    expect(client.seen.ended).toBe(false)
    w.clock.now = CHECK_MS
    stream.tick(w.clock.now)
    await w.settle()
    client.read(100)
    await w.settle() // `end` is emitted on the next tick
    expect(client.seen.ended).toBe(true)
    expect(w.closed).toEqual([stream])
    expect(w.listeners.size).toBe(0)
  })

  it("a body the response never reads (a HEAD, a client gone before it started) is let go after 10 s", async () => {
    const w = world()
    const stream = new EventStream(w.hub, principal, "run_1", 0, undefined)
    w.clock.now = 9_999
    stream.tick(w.clock.now)
    await w.settle()
    expect(w.closed).toEqual([])
    w.clock.now = 10_000
    stream.tick(w.clock.now)
    await w.settle()
    expect(w.closed).toEqual([stream])
    expect(w.listeners.size).toBe(0)
  })

  it("a client gone (the body destroyed) lets go of the bus and the slot once", async () => {
    const { stream, w } = await opened()
    expect(w.listeners.size).toBe(1)
    stream.body.destroy()
    await w.settle()
    w.commit("run.message", true)
    stream.tick(PING_MS * 10)
    await w.settle()
    expect(w.closed).toEqual([stream])
    expect(w.listeners.size).toBe(0)
  })
})
