/**
 * Runs over HTTP on the embedded Postgres, on the live clock, continued (Runs.LiveClock.test.ts has
 * the run's life): SSE pings and revocation, stream limits, revocation before dispatch, usage, a
 * defect restarting one actor, and the purge of a deleted environment (contract 4, 6, 8; D8, D16).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Scope } from "effect"
import { defaultRunConfig } from "../src/Config/AppConfig.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, readSse, request } from "./support/Client.js"
import { freshDatabase } from "./support/Database.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { upload } from "./support/Files.js"
import { isTerminal, RUNNER_SCOPES, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

describe("runs (live clock)", () => {
  it.live("SSE: pings while idle; a revoked key's stream ends within the check interval", () =>
    Effect.gen(function*() {
      const app = yield* TestApp
      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "never" }])
      const runner = yield* createKey(s.tenantId, RUNNER_SCOPES, "runner")
      const conv = yield* s.conversation(runner.secret)
      const run = expectSingle(yield* s.startRun(conv.id, "x", { key: runner.secret }), 202)
      const url = `${app.baseUrl}${s.P}/runs/${run.id}/events/stream`
      const streaming = yield* Effect.fork(readSse(url, { authorization: `Bearer ${runner.secret}`, accept: "text/event-stream" }))
      yield* Effect.sleep("2500 millis")
      const revoke = yield* request("POST", `${s.P}/api-keys/${runner.id}/revoke`, { key: s.key })
      expect(revoke.status, revoke.text).toBe(200)
      const revokedAt = Date.now()
      const result = yield* streaming.await.pipe(Effect.flatten)
      expect(Date.now() - revokedAt).toBeLessThan(5_000)
      expect(result.comments).toBeGreaterThanOrEqual(1) // ping every second in this app
      expect(result.frames.map((f) => f.event)).toContain("run.started")
      // The run itself ends failed at its next dispatch check or is still waiting in its step;
      // the run created by the revoked key is not readable with it any more.
      expect((yield* request("GET", `${s.P}/runs/${run.id}`, { key: runner.secret })).status).toBe(401)
      yield* request("POST", `${s.P}/runs/${run.id}/cancel`, { key: s.key })
    }).pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, pingSeconds: 1, streamAuthCheckSeconds: 1 } }))), 30_000)

  it.live("stopping the service (what SIGTERM does) with a stream open: the stream ends, the service stops", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const scope = yield* Scope.make()
      const app = yield* Layer.buildWithScope(makeTestApp({}, db.url), scope)
      const streaming = yield* Effect.gen(function*() {
        const { baseUrl } = yield* TestApp
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "never" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        return yield* Effect.fork(readSse(`${baseUrl}${s.P}/runs/${run.id}/events/stream`, { authorization: `Bearer ${s.key}` }))
      }).pipe(Effect.provide(app))
      yield* Effect.sleep("1 second")
      const stopped = yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("10 seconds"), Effect.either)
      expect(stopped._tag).toBe("Right")
      const read = yield* Fiber.join(streaming).pipe(Effect.timeout("5 seconds"))
      // the history it was sent before the end: the client resumes elsewhere from the last id
      expect(read.frames.map((f) => f.event)).toContain("run.queued")
    }).pipe(Effect.scoped), 30_000)

  it.live(
    "stream limits per actor and per cell (16 and 128 by default); one more is 429 stream_limit_reached",
    () =>
      Effect.gen(function*() {
        const app = yield* TestApp
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "never" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        const url = `${app.baseUrl}${s.P}/runs/${run.id}/events/stream`
        const controllers: Array<AbortController> = []
        const open = (key = s.key) =>
          Effect.promise(async () => {
            const c = new AbortController()
            controllers.push(c)
            const res = await fetch(url, { headers: { authorization: `Bearer ${key}` }, signal: c.signal })
            return { status: res.status, body: res.status === 200 ? "" : await res.text() }
          })
        const first = yield* Effect.forEach(Array.from({ length: 2 }), () => open(), { concurrency: "unbounded" })
        expect(first.map((r) => r.status)).toEqual([200, 200])
        const third = yield* open()
        expect(third.status).toBe(429)
        expect(JSON.parse(third.body).error.code).toBe("stream_limit_reached")
        // Closing one frees its slot.
        controllers[0]!.abort()
        const again = yield* eventually(open(), (r) => r.status === 200, 40)
        expect(again.status).toBe(200)
        // The cell's limit (3 here) counts every caller: a second key gets one more, then 429.
        const other = (yield* createKey(s.tenantId, RUNNER_SCOPES, "other")).secret
        expect((yield* open(other)).status).toBe(200)
        const overCell = yield* open(other)
        expect(overCell.status).toBe(429)
        expect(JSON.parse(overCell.body).error.message).toContain("per environment")
        for (const c of controllers) c.abort()
        yield* request("POST", `${s.P}/runs/${run.id}/cancel`, { key: s.key })
      }).pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, streamsPerActor: 2, streamsPerCell: 3 } }))),
    30_000
  )

  it.live("revocation before dispatch: a queued run of a revoked key ends failed (authorization_revoked)", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "sleep", seconds: 2 }, { type: "text", text: "ok" }])
      const runner = yield* createKey(s.tenantId, RUNNER_SCOPES, "runner")
      // One execution slot: the manager's run holds it while the runner's run waits in the queue.
      const blocker = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
      yield* eventually(s.getRun(blocker.id), (r) => r.status === "running")
      const queued = expectSingle(yield* s.startRun((yield* s.conversation(runner.secret)).id, "x", { key: runner.secret }), 202)
      expect((yield* s.getRun(queued.id)).status).toBe("queued")
      expect((yield* request("POST", `${s.P}/api-keys/${runner.id}/revoke`, { key: s.key })).status).toBe(200)
      const ended = yield* eventually(s.getRun(queued.id), (r) => isTerminal(r.status))
      expect(ended).toMatchObject({ status: "failed", status_reason: "authorization_revoked", started_at: null })
      expect((yield* s.getRun(blocker.id)).status).toBe("succeeded")
    }).pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, maxActiveRunsPerCell: 1 } }))), 30_000)

  it.live("usage: runs, model calls and tokens per agent revision, from usage records", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "text", text: "one two three" }])
      for (let i = 0; i < 3; i++) {
        expectSingle(yield* s.startRun((yield* s.conversation()).id, "four words go here", { headers: { prefer: "wait=10" } }))
      }
      const usage = expectSingle(yield* request("GET", `${s.P}/usage`, { key: s.key }))
      expect(usage).toMatchObject({ object: "usage", group_by: "agent_revision" })
      expect(usage.totals).toMatchObject({ runs: 3, model_calls: 3, input_tokens: 3 * 6, output_tokens: 9, tool_calls: 0 })
      expect(usage.buckets).toHaveLength(1)
      expect(usage.buckets[0].key).toBe(s.rev.id)
      const byDay = expectSingle(yield* request("GET", `${s.P}/usage?group_by=day`, { key: s.key }))
      expect(byDay.buckets[0].key).toBe(new Date().toISOString().slice(0, 10))
      const sql = yield* SqlClient.SqlClient
      const [{ n }] = yield* sql<{ n: string }>`SELECT count(*) AS n FROM usage_records WHERE kind = 'model_call'`.pipe(Effect.orDie)
      expect(Number(n)).toBe(3)
      const empty = expectSingle(yield* request("GET", `${s.P}/usage?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z`, { key: s.key }))
      expect(empty.totals.runs).toBe(0)
      expectErrorCode(yield* request("GET", `${s.P}/usage?from=yesterday`, { key: s.key }), 400, "parameter_invalid")
    }).pipe(Effect.provide(makeTestApp())), 30_000)
  it.live("a defect in one run's actor restarts that actor from the database; the cell and other runs go on", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const s = yield* scriptedSandbox([{ type: "text", text: "fine" }])
      const flaky = yield* s.conversation()
      // The database refuses every event of runs in the flaky conversation until the switch is cleared.
      yield* Effect.orDie(sql.unsafe(`CREATE TABLE flaky_conversations (id text PRIMARY KEY)`))
      yield* Effect.orDie(sql`INSERT INTO flaky_conversations VALUES (${flaky.id})`)
      yield* Effect.orDie(sql.unsafe(`
        CREATE FUNCTION flaky_events() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.type <> 'run.queued' AND EXISTS (
            SELECT 1 FROM runs r JOIN flaky_conversations f ON f.id = r.conversation_id WHERE r.id = NEW.run_id) THEN
            RAISE EXCEPTION 'injected failure';
          END IF;
          RETURN NEW;
        END $$`))
      yield* Effect.orDie(
        sql.unsafe(`CREATE TRIGGER flaky_events BEFORE INSERT ON run_events FOR EACH ROW EXECUTE FUNCTION flaky_events()`)
      )
      const stuck = expectSingle(yield* s.startRun(flaky.id), 202)
      yield* Effect.sleep("1500 millis") // several failed attempts, with backoff
      expect((yield* s.getRun(stuck.id)).status).toBe("queued")
      // Same cell, another conversation: unaffected.
      const other = expectSingle(yield* s.startRun((yield* s.conversation()).id, "x", { headers: { prefer: "wait=10" } }))
      expect(other.status).toBe("succeeded")
      yield* Effect.orDie(sql`DELETE FROM flaky_conversations`)
      const recovered = yield* eventually(s.getRun(stuck.id), (r) => isTerminal(r.status), 200)
      expect(recovered.status).toBe("succeeded")
      expect((yield* s.events(stuck.id)).items.map((e) => e.sequence)).toEqual([1, 2, 3, 4])
    }).pipe(Effect.provide(makeTestApp())), 30_000)

  it.live("deleting the environment purges its conversations, runs, events, usage records, agents and files", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([
        { type: "file", filename: "out.txt", content: "produced" },
        { type: "text", text: "to be forgotten" }
      ])
      const uploader = yield* createKey(s.tenantId, ["files:write"], "uploader")
      expect((yield* upload(s.P, uploader.secret, "uploaded bytes")).status).toBe(201)
      const run = expectSingle(yield* s.startRun((yield* s.conversation()).id, "private words", { headers: { prefer: "wait=10" } }))
      expect(run.status).toBe("succeeded")
      const admin = yield* createKey(s.tenantId, ["environments:read", "environments:write"], "admin")
      const del = yield* request("DELETE", s.P, { key: admin.secret })
      expect(del.status, del.text).toBe(202)
      const sql = yield* SqlClient.SqlClient
      // Once purged, the environment's keys are revoked: the job is read from the database.
      const state = Effect.map(Effect.orDie(sql<{ state: string }>`SELECT state FROM deletion_jobs WHERE id = ${del.body.data.id}`), (r) =>
        r[0]?.state)
      expect(
        yield* eventually(state, (st) =>
          st === "succeeded")
      ).toBe("succeeded")
      const count = (table: string) =>
        Effect.map(
          sql.unsafe<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE tenant_id = $1`, [s.tenantId]),
          (r) => Number(r[0]!.n)
        )
      for (
        const table of [
          "runs",
          "conversations",
          "usage_records",
          "agent_revisions",
          "agents",
          "model_profiles",
          "workspaces",
          "quickstarts",
          "files"
        ]
      ) {
        expect(yield* Effect.orDie(count(table)), table).toBe(0)
      }
      const [{ n }] = yield* Effect.orDie(sql<{ n: string }>`SELECT count(*) AS n FROM run_events WHERE run_id = ${run.id}`)
      expect(Number(n)).toBe(0)
      // the files' bytes went with them
      const chunks = yield* Effect.orDie(sql<{ n: string }>`
        SELECT count(*) AS n FROM file_chunks c WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.id = c.file_id)`)
      expect(Number(chunks[0]!.n)).toBe(0)
      // Outside a purge, events and revisions stay immutable.
      const other = yield* scriptedSandbox([{ type: "text", text: "kept" }])
      const kept = expectSingle(yield* other.startRun((yield* other.conversation()).id, "x", { headers: { prefer: "wait=10" } }))
      const refused = yield* Effect.either(sql`DELETE FROM run_events WHERE run_id = ${kept.id}`)
      expect(refused._tag).toBe("Left")
      const refusedRevision = yield* Effect.either(sql`DELETE FROM agent_revisions WHERE id = ${other.rev.id}`)
      expect(refusedRevision._tag).toBe("Left")
    }).pipe(Effect.provide(makeTestApp({ purgeDelaySeconds: 1, sweepIntervalSeconds: 1 }))), 30_000)
}, { timeout: 60_000 })
