/**
 * One notification per statement that writes run events (issue 37, migration 0029): a scripted
 * run writes its `run.queued` in the admission's statement and its start, answer and end in its
 * one commit, so a listener of channel `run_events` gets one notification for its four events
 * (one per event before 0029; two before 0034, which announces no `run.queued`: nobody can follow
 * a run before its admission committed), `{"events": [...]}` with the events in sequence order;
 * and a `Prefer: wait` and the stream still get the whole run.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

import { makeTestApp, TestApp } from "./support/App.js"
import { readSse } from "./support/Client.js"
import { freshDatabase, pg } from "./support/Database.js"
import { scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

interface Note {
  readonly run_id: string
  readonly sequence: number
  readonly event?: { readonly type: string }
}

/** The notifications of channel `run_events` from now on, each as its notes. */
const listen = (url: string) =>
  Effect.gen(function*() {
    const notices: Array<ReadonlyArray<Note>> = []
    yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const c = new pg.Client({ connectionString: url }) as any
        await c.connect()
        c.on("notification", (n: { channel: string; payload: string }) => {
          // one event's note before migration 0029, the statement's notes since
          const notice = JSON.parse(n.payload)
          if (n.channel === "run_events") notices.push(notice.events ?? [notice])
        })
        await c.query("LISTEN run_events")
        return c
      }),
      (c) => Effect.promise(() => c.end())
    )
    return notices
  })

describe("run event notifications", () => {
  it.live("a run's commit is one notification carrying all its events", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      yield* Effect.gen(function*() {
        const app = yield* TestApp
        const s = yield* scriptedSandbox([{ type: "text", text: "done" }])
        const conv = yield* s.conversation()
        const notices = yield* listen(db.url)
        const res = yield* s.startRun(conv.id, "x", { headers: { prefer: "wait=10" } })
        expect(res.status, res.text).toBe(200)
        expect(res.body.data.status).toBe("succeeded")
        const runId = res.body.data.id as string
        // the test's own LISTEN connection may get the last notification after the service's
        // listener (which answered the wait): it is awaited, not read at once
        const mine = yield* eventually(
          Effect.sync(() => notices.filter((n) => n.some((e) => e.run_id === runId))),
          (ns) => ns.length >= 1
        )
        expect(mine.map((n) => n.map((e) => [e.sequence, e.event?.type]))).toEqual([
          [[2, "run.started"], [3, "run.message"], [4, "run.succeeded"]]
        ])
        // the stream replays from the database and ends with the run
        const sse = yield* readSse(`${app.baseUrl}${s.P}/runs/${runId}/events/stream`, { authorization: `Bearer ${s.key}` })
        expect(sse.frames.map((f) => f.event)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
      }).pipe(Effect.provide(makeTestApp({}, db.url)))
    }).pipe(Effect.scoped), 60_000)

  it.live(
    "a commit whose notes do not fit one notification sends one per event, the oversized one without its event",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        yield* Effect.gen(function*() {
          const app = yield* TestApp
          const long = "a".repeat(9_000)
          const s = yield* scriptedSandbox([{ type: "text", text: long }])
          const conv = yield* s.conversation()
          const notices = yield* listen(db.url)
          const res = yield* s.startRun(conv.id, "x", { headers: { prefer: "wait=10" } })
          expect(res.status, res.text).toBe(200)
          expect(res.body.data).toMatchObject({ status: "succeeded", output: [{ type: "text", text: long }] })
          const runId = res.body.data.id as string
          const mine = notices.filter((n) => n.some((e) => e.run_id === runId))
          // the commit's three events came one by one, in order; the answer's note had no room for it
          expect(mine.map((n) => n.map((e) => e.sequence))).toEqual([[2], [3], [4]])
          expect(mine[0]![0]!.event?.type).toBe("run.started")
          expect(mine[1]![0]!.event).toBeUndefined()
          const sse = yield* readSse(`${app.baseUrl}${s.P}/runs/${runId}/events/stream`, { authorization: `Bearer ${s.key}` })
          expect(sse.frames.map((f) => f.event)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
        }).pipe(Effect.provide(makeTestApp({}, db.url)))
      }).pipe(Effect.scoped),
    60_000
  )
})
