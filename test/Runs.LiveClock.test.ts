/**
 * Conversations and durable runs end to end over HTTP on the embedded Postgres (contract 3.1, 4,
 * 6; D7, D8), on the live clock: admission, the run actor with the scripted model, events (paging
 * and SSE), Prefer: wait, one open run per conversation, cancel, client disconnects, the first
 * key's workspace. Runs.Access.test.ts continues with streams, revocation, usage and the purge.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, readSse, request } from "./support/Client.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

/** Another first (scope-less, quickstart) key of the tenant's sandbox. */
const provisionSandboxKey = (tenantId: string) => createKey(tenantId, undefined, "first")

describe("runs (live clock)", () => {
  it.live("a scripted run: 202 + Location while durable, then succeeded with events 1..4, output and usage", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "text", text: "You said: {{input}}" }])
      const conv = yield* s.conversation()
      expect(conv.id).toMatch(/^conv_/)
      const res = yield* s.startRun(conv.id, "hello there")
      const accepted = expectSingle(res, 202)
      expect(accepted.id).toMatch(/^run_/)
      expect(res.headers.get("location")).toBe(`${s.P}/runs/${accepted.id}`)
      expect(["queued", "running", "succeeded"]).toContain(accepted.status)
      expect(accepted).toMatchObject({ object: "run", conversation_id: conv.id, agent_revision_id: s.rev.id })
      const run = yield* eventually(s.getRun(accepted.id), (r) => isTerminal(r.status))
      expect(run.status).toBe("succeeded")
      expect(run.output).toEqual([{ type: "text", text: "You said: hello there" }])
      expect(run.usage).toEqual({ input_tokens: 4, output_tokens: 4, model_calls: 1, tool_calls: 0 })
      expect(run.started_at).not.toBeNull()
      expect(run.completed_at).not.toBeNull()
      expect(Date.parse(run.start_deadline_at) - Date.parse(run.created_at)).toBe(300_000)
      expect(Date.parse(run.authorization_expires_at) - Date.parse(run.created_at)).toBe(900_000)
      expect(Date.parse(run.execution_deadline_at) - Date.parse(run.started_at)).toBe(300_000)
      const page = yield* s.events(run.id)
      expect(page.items.map((e) => [e.sequence, e.type])).toEqual([
        [1, "run.queued"],
        [2, "run.started"],
        [3, "run.message"],
        [4, "run.succeeded"]
      ])
      expect(page.next_cursor).toBeNull()
      expect(run.last_event_id).toBe(page.items[3].id)
      expect(page.items[2].data).toMatchObject({ role: "assistant", content: [{ type: "text", text: "You said: hello there" }] })
      expect(page.items[3].data).toMatchObject({ status: "succeeded" })
      for (const e of page.items) {
        expect(Object.keys(e).sort()).toEqual(["created_at", "data", "id", "object", "run_id", "sequence", "type"])
      }
      // A second run in the same conversation sees the first exchange (conversation history).
      const second = expectSingle(yield* s.startRun(conv.id, "again", { headers: { prefer: "wait=5" } }))
      expect(second.status).toBe("succeeded")
      expect(second.usage.input_tokens).toBeGreaterThan(run.usage.input_tokens)
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live("Prefer: wait returns 200 with the terminal run, or the same durable 202 when it takes longer", () =>
    Effect.gen(function*() {
      const fast = yield* scriptedSandbox([{ type: "text", text: "done" }])
      const fastConv = (yield* fast.conversation()).id
      const once = { headers: { prefer: "wait=10" }, idempotencyKey: "k-wait" }
      const res = yield* fast.startRun(fastConv, "x", once)
      const run = expectSingle(res, 200)
      expect(run.status).toBe("succeeded")
      expect(res.headers.get("preference-applied")).toBe("wait=10")
      expect(res.headers.get("location")).toBe(`${fast.P}/runs/${run.id}`)
      // the replay is the same response: 200, the same run, Location and Preference-Applied
      const replay = yield* fast.startRun(fastConv, "x", once)
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
      expect(replay.text).toBe(res.text)
      expect(replay.headers.get("preference-applied")).toBe("wait=10")
      expect(replay.headers.get("location")).toBe(res.headers.get("location"))

      const slow = yield* scriptedSandbox([{ type: "sleep", seconds: 3 }, { type: "text", text: "late" }])
      const started = Date.now()
      const slowConv = (yield* slow.conversation()).id
      const slowOnce = { headers: { prefer: "wait=1" }, idempotencyKey: "k-slow" }
      const res2 = yield* slow.startRun(slowConv, "x", slowOnce)
      expect(Date.now() - started).toBeGreaterThanOrEqual(900)
      const pending = expectSingle(res2, 202)
      expect(["queued", "running"]).toContain(pending.status)
      expect(res2.headers.get("preference-applied")).toBe("wait=1")
      // ended after its wait: the replay is still the 202, even once the run has ended
      yield* eventually(slow.getRun(pending.id), (r) => isTerminal(r.status))
      const replay2 = yield* slow.startRun(slowConv, "x", slowOnce)
      expect(replay2.status).toBe(202)
      expect(replay2.headers.get("idempotent-replayed")).toBe("true")
      expect(replay2.text).toBe(res2.text)
      // "wait=60" is treated as 10.
      const res3 = yield* slow.startRun((yield* slow.conversation()).id, "x", { headers: { prefer: "wait=60" } })
      expect(res3.headers.get("preference-applied")).toBe("wait=10")
      expect(expectSingle(res3, 200).status).toBe("succeeded")
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live("one unfinished run per conversation (409 conversation_busy); another conversation is free", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 2 }, { type: "text", text: "ok" }])
      const conv = yield* s.conversation()
      const first = expectSingle(yield* s.startRun(conv.id), 202)
      expectErrorCode(yield* s.startRun(conv.id), 409, "conversation_busy")
      expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
      yield* eventually(s.getRun(first.id), (r) => isTerminal(r.status))
      expectSingle(yield* s.startRun(conv.id), 202) // free again once the first ended
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live("cancel: 202 cancel_requested then cancelled; a finished run is 409 run_not_cancellable", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "never" }])
      const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
      yield* eventually(s.getRun(run.id), (r) => r.status === "running")
      const res = yield* request("POST", `${s.P}/runs/${run.id}/cancel`, { key: s.key })
      const cancelling = expectSingle(res, 202)
      expect(["cancel_requested", "cancelled"]).toContain(cancelling.status)
      expect(res.headers.get("location")).toBe(`${s.P}/runs/${run.id}`)
      const done = yield* eventually(s.getRun(run.id), (r) => r.status === "cancelled")
      expect(done).toMatchObject({ status: "cancelled", status_reason: "cancelled_by_request", output: null })
      const types = (yield* s.events(run.id)).items.map((e) => e.type)
      expect(types).toEqual(["run.queued", "run.started", "run.cancel_requested", "run.cancelled"])
      expectErrorCode(yield* request("POST", `${s.P}/runs/${run.id}/cancel`, { key: s.key }), 409, "run_not_cancellable")
      // The model call was interrupted: no usage was recorded for it.
      expect(done.usage.model_calls).toBe(0)
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live("a client disconnect never cancels: a Prefer: wait request and a stream aborted mid-run", () =>
    Effect.gen(function*() {
      const app = yield* TestApp
      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 1.5 }, { type: "text", text: "still done" }])
      const conv = yield* s.conversation()
      const aborted = yield* Effect.promise(async () => {
        const c = new AbortController()
        setTimeout(() => c.abort(), 300)
        return fetch(`${app.baseUrl}${s.P}/conversations/${conv.id}/runs`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${s.key}`,
            "content-type": "application/json",
            "idempotency-key": "disconnect-1",
            prefer: "wait=10"
          },
          body: JSON.stringify({ input: [{ type: "text", text: "x" }] }),
          signal: c.signal
        }).then(() => "answered", () => "aborted")
      })
      expect(aborted).toBe("aborted")
      // The run was admitted before the wait; the same idempotency key finds it.
      const replay = yield* request("POST", `${s.P}/conversations/${conv.id}/runs`, {
        key: s.key,
        body: { input: [{ type: "text", text: "x" }] },
        idempotencyKey: "disconnect-1"
      })
      const run = replay.status === 409 ? undefined : replay.body.data
      const runId: string = run?.id ??
        (yield* Effect.orDie((yield* SqlClient.SqlClient)<{ id: string }>`SELECT id FROM runs WHERE conversation_id = ${conv.id}`))[0]!.id
      const stream = yield* Effect.promise(async () => {
        const c = new AbortController()
        const res = await fetch(`${app.baseUrl}${s.P}/runs/${runId}/events/stream`, {
          headers: { authorization: `Bearer ${s.key}` },
          signal: c.signal
        })
        c.abort()
        return res.status
      })
      expect(stream).toBe(200)
      const done = yield* eventually(s.getRun(runId), (r) => isTerminal(r.status))
      expect(done).toMatchObject({ status: "succeeded", output: [{ type: "text", text: "still done" }] })
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live(
    "the first (quickstart) key acts only in its quickstart workspace: runs there, 403 elsewhere, others' runs 404",
    () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "managed" }])
        const quick = yield* operator("GET", `/tenants/${s.tenantId}/environments/sandbox/quickstart`)
        expect(quick.status, quick.text).toBe(200)
        const conv = expectSingle(
          yield* request("POST", `${s.P}/conversations`, {
            key: s.key,
            body: { workspace_id: quick.body.workspace_id, agent_revision_id: quick.body.agent_revision_id }
          }),
          201
        )
        // s.key here is the manager; the sandbox's first key is the quickstart key.
        const first = (yield* provisionSandboxKey(s.tenantId)).secret
        const mine = expectSingle(
          yield* request("POST", `${s.P}/conversations`, {
            key: first,
            body: { workspace_id: quick.body.workspace_id, agent_revision_id: quick.body.agent_revision_id }
          }),
          201
        )
        const run = expectSingle(yield* s.startRun(mine.id, "hello", { key: first, headers: { prefer: "wait=10" } }))
        expect(run.status).toBe("succeeded")
        expect(run.output[0].text).toContain("hello")
        expectErrorCode(
          yield* request("POST", `${s.P}/conversations`, { key: first, body: { workspace_id: s.ws.id, agent_revision_id: s.rev.id } }),
          403,
          "workspace_not_allowed"
        )
        const managed = expectSingle(yield* s.startRun((yield* s.conversation()).id, "x", { headers: { prefer: "wait=10" } }))
        expectErrorCode(yield* request("GET", `${s.P}/runs/${managed.id}`, { key: first }), 404, "resource_missing")
        // A run in a conversation the key cannot see, or in none: 404 on conversation_id, nothing admitted.
        const other = (yield* s.conversation()).id
        for (const [conversationId, key] of [[other, first], ["conv_missing", s.key]] as const) {
          const refused = yield* s.startRun(conversationId, "x", { key })
          expectErrorCode(refused, 404, "resource_missing")
          expect(refused.body.error.param).toBe("conversation_id")
        }
        const sql = yield* SqlClient.SqlClient
        expect(yield* Effect.orDie(sql`SELECT id FROM runs WHERE conversation_id IN (${other}, 'conv_missing')`)).toEqual([])
        // The manager sees both; the first key's usage counts its own workspace only.
        expect((yield* s.getRun(run.id)).id).toBe(run.id)
        expect(conv.workspace_id).toBe(quick.body.workspace_id)
        const usage = expectSingle(yield* request("GET", `${s.P}/usage`, { key: first }))
        expect(usage.totals.runs).toBe(1)
      }).pipe(Effect.provide(makeTestApp())),
    30_000
  )

  it.live("a model failure ends the run failed with the reason; no HTTP error", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "fail", message: "scripted failure" }])
      const run = expectSingle(yield* s.startRun((yield* s.conversation()).id, "x", { headers: { prefer: "wait=10" } }))
      expect(run).toMatchObject({ status: "failed", status_reason: "model_failed" })
      const last = (yield* s.events(run.id)).items.at(-1)
      expect(last).toMatchObject({ type: "run.failed", data: { status: "failed", status_reason: "model_failed" } })
      expect(last.data.error.message).toBe("scripted failure")
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live(
    "events: pages by cursor; cursor and event id are interchangeable; foreign ids are 400 invalid_cursor",
    () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "a b c" }])
        const conv = yield* s.conversation()
        const run = expectSingle(yield* s.startRun(conv.id, "x", { headers: { prefer: "wait=10" } }))
        const other = expectSingle(yield* s.startRun(conv.id, "y", { headers: { prefer: "wait=10" } }))
        const all = (yield* s.events(run.id)).items
        expect(all).toHaveLength(4)
        const p1 = yield* s.events(run.id, "?limit=2")
        expect(p1.items.map((e) => e.sequence)).toEqual([1, 2])
        expect(p1.next_cursor).toBe(p1.items[1].id)
        const p2 = yield* s.events(run.id, `?limit=2&cursor=${p1.next_cursor}`)
        expect(p2.items.map((e) => e.sequence)).toEqual([3, 4])
        expect(p2.next_cursor).toBeNull()
        // Any event id works as a cursor.
        expect((yield* s.events(run.id, `?cursor=${all[0].id}`)).items.map((e) => e.sequence)).toEqual([2, 3, 4])
        // Nothing after the last event (yet): an empty page, null cursor.
        expect(yield* s.events(run.id, `?cursor=${all[3].id}`)).toMatchObject({ items: [], next_cursor: null })
        const otherEvent = (yield* s.events(other.id)).items[0].id
        for (const cursor of [otherEvent, "evt_nope", "garbage"]) {
          expectErrorCode(yield* request("GET", `${s.P}/runs/${run.id}/events?cursor=${cursor}`, { key: s.key }), 400, "invalid_cursor")
        }
        expectErrorCode(yield* request("GET", `${s.P}/runs/${run.id}/events?limit=0`, { key: s.key }), 400, "parameter_invalid")
        expectErrorCode(yield* request("GET", `${s.P}/runs/run_missing/events`, { key: s.key }), 404, "resource_missing")
      }).pipe(Effect.provide(makeTestApp())),
    30_000
  )

  it.live(
    "SSE: the whole history with id/event/data frames, Last-Event-ID resumes, ends after the terminal event",
    () =>
      Effect.gen(function*() {
        const app = yield* TestApp
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 1 }, { type: "text", text: "streamed" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        const url = `${app.baseUrl}${s.P}/runs/${run.id}/events/stream`
        const auth = { authorization: `Bearer ${s.key}`, accept: "text/event-stream" }
        const live = yield* readSse(url, auth)
        expect(live.status).toBe(200)
        expect(live.headers.get("content-type")).toContain("text/event-stream")
        expect(live.headers.get("cache-control")).toBe("no-store")
        expect(live.frames.map((f) => f.event)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
        for (const f of live.frames) {
          expect(f.id).toBe(f.data.id)
          expect(f.event).toBe(f.data.type)
        }
        const paged = (yield* s.events(run.id)).items
        expect(live.frames.map((f) => f.data)).toEqual(paged)
        // After the run ended: resume after event 2 by Last-Event-ID, or by cursor.
        const resumed = yield* readSse(url, { ...auth, "last-event-id": paged[1].id })
        expect(resumed.frames.map((f) => f.data.sequence)).toEqual([3, 4])
        const byCursor = yield* readSse(`${url}?cursor=${paged[2].id}`, auth)
        expect(byCursor.frames.map((f) => f.data.sequence)).toEqual([4])
        const bad = yield* readSse(url, { ...auth, "last-event-id": "evt_unknown" })
        expect(bad.status).toBe(400)
        expect(JSON.parse(bad.body).error.code).toBe("invalid_cursor")
        const wrongAccept = yield* readSse(url, { authorization: auth.authorization, accept: "application/json" })
        expect(wrongAccept.status).toBe(400)
      }).pipe(Effect.provide(makeTestApp())),
    30_000
  )
})
