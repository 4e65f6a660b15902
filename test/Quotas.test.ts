/**
 * Quotas (D16), through the service's HTTP API and real Postgres: 64 concurrent run creations
 * against `runs_per_day = 10` admit exactly 10 (the rest 429 `quota_exceeded` with Retry-After
 * until midnight UTC, nothing of them written, a refused request safe to retry), and against
 * `concurrent_runs = 5` exactly 5, a finished run making room; `tokens_per_day` stops admissions
 * once the day's model calls reached it (the counter equals the records' sum); `storage_bytes`
 * refuses an upload that does not fit, a deleted file gives its bytes back, and a run's output file
 * that does not fit is reported (`run.file.failed`, `quota_exceeded`) instead of stored (D20); the operator's routes
 * and their refusals; on TestClock, the daily quotas reset at midnight UTC.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, TestClock } from "effect"

import { defaultQuotaDefaults } from "../src/Config/QuotaDefaults.js"
import { makeTestApp } from "./support/App.js"
import { cli } from "./support/Cli.js"
import { createKey, operator, request, setSettings } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { upload } from "./support/Files.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

const UNLIMITED = { ratePerSecond: 100_000, burst: 100_000 }
const DAY_MS = 86_400_000

const setQuota = (tenantId: string, name: string, limit: unknown, environment = "sandbox") =>
  operator("PUT", `/tenants/${tenantId}/environments/${environment}/quotas/${name}`, { limit })

const quotasOf = (P: string, key: string) =>
  Effect.map(request("GET", `${P}/quotas`, { key }), (r) => {
    const page = expectList(r)
    expect(page.next_cursor).toBeNull()
    return Object.fromEntries(page.items.map((q: any) => [q.name, q])) as Record<string, any>
  })

const runsOfCell = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      Effect.orDie(sql<{ runs: number; events: number }>`
        SELECT count(*)::int AS runs,
               (SELECT count(*)::int FROM run_events e JOIN runs r ON r.id = e.run_id WHERE r.tenant_id = ${tenantId}) AS events
        FROM runs WHERE tenant_id = ${tenantId}`),
      ([row]) => row!
    ))

const nextMidnight = (ms: number) => (Math.floor(ms / DAY_MS) + 1) * DAY_MS

/** `n` conversations of the sandbox's revision, then one run creation in each, all at once. */
const concurrentRuns = (s: Effect.Effect.Success<ReturnType<typeof scriptedSandbox>>, n: number) =>
  Effect.gen(function*() {
    const conversations = yield* Effect.forEach(Array.from({ length: n }), () => s.conversation(), { concurrency: 8 })
    return yield* Effect.forEach(conversations, (c) => s.startRun(c.id), { concurrency: "unbounded" })
  })

// Before `layer(...)`: it replaces the module's `it.effect` with one that provides its layer (and no TestClock).
describe("quotas on TestClock (D16)", () => {
  it.effect("runs_per_day and tokens_per_day reset at midnight UTC", () =>
    Effect.gen(function*() {
      const T = Date.UTC(2026, 5, 30, 23, 59, 0)
      yield* TestClock.setTime(T)
      yield* Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok fine" }])
        expect((yield* setQuota(s.tenantId, "runs_per_day", 2)).status).toBe(200)
        for (let i = 0; i < 2; i++) {
          const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* eventually(s.getRun(run.id), (r) => isTerminal(r.status))
        }
        const refused = yield* s.startRun((yield* s.conversation()).id)
        expectErrorCode(refused, 429, "quota_exceeded")
        expect(refused.headers.get("retry-after")).toBe("60")
        const today = yield* quotasOf(s.P, s.key)
        expect(today.runs_per_day).toMatchObject({ used: 2, resets_at: "2026-07-01T00:00:00.000Z" })
        expect(today.tokens_per_day.used).toBeGreaterThan(0)

        yield* TestClock.adjust("60 seconds")
        const tomorrow = yield* quotasOf(s.P, s.key)
        expect(tomorrow.runs_per_day).toMatchObject({ used: 0, resets_at: "2026-07-02T00:00:00.000Z" })
        expect(tomorrow.tokens_per_day.used).toBe(0)
        expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        expect((yield* quotasOf(s.P, s.key)).runs_per_day.used).toBe(1)
      }).pipe(Effect.provide(makeTestApp()))
    }), 60_000)

  it.effect("a scheduled time past a quota starts no run (its claim undone); the schedule goes on", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2026, 0, 5, 10, 0, 0))
      yield* Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const key = (yield* createKey(s.tenantId, ["schedules:read", "schedules:write", "runs:write"], "scheduler")).secret
        expect((yield* setQuota(s.tenantId, "runs_per_day", 1)).status).toBe(200)
        yield* setSettings(s.tenantId, { schedule_min_interval_seconds: 1 })
        const schedule = expectSingle(
          yield* request("POST", `${s.P}/schedules`, {
            key,
            body: { workspace_id: s.ws.id, agent_revision_id: s.rev.id, cron: "* * * * * *", input: [{ type: "text", text: "tick" }] }
          }),
          201
        )
        const firings = Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.map(
            Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM schedule_firings WHERE schedule_id = ${schedule.id}`),
            ([row]) => row!.n
          ))
        const get = Effect.map(request("GET", `${s.P}/schedules/${schedule.id}`, { key }), (r) => expectSingle(r))
        yield* TestClock.adjust("1 second")
        yield* eventually(firings, (n) => n === 1)
        yield* TestClock.adjust("1 second")
        const skipped = yield* eventually(get, (d) => d.next_run_at === new Date(Date.UTC(2026, 0, 5, 10, 0, 3)).toISOString())
        expect(skipped.status).toBe("active")
        expect(yield* firings).toBe(1)
        expect((yield* runsOfCell(s.tenantId)).runs).toBe(1)
        expect((yield* setQuota(s.tenantId, "runs_per_day", 2)).status).toBe(200)
        yield* TestClock.adjust("1 second")
        yield* eventually(firings, (n) => n === 2)
        expect((yield* runsOfCell(s.tenantId)).runs).toBe(2)
      }).pipe(Effect.provide(makeTestApp({ schedules: { pollMillis: 365 * 86_400_000 } })))
    }), 60_000)
})

layer(makeTestApp({ rateLimit: UNLIMITED, dbPoolSize: 24 }), { excludeTestServices: true, timeout: "120 seconds" })(
  "quotas (D16)",
  (it) => {
    it.effect("64 concurrent runs against runs_per_day = 10: exactly 10 admitted, 54 are 429 quota_exceeded until midnight UTC", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const before = yield* quotasOf(s.P, s.key)
        expect(before.runs_per_day).toEqual({
          object: "quota",
          name: "runs_per_day",
          limit: defaultQuotaDefaults.sandbox.runs_per_day,
          used: 0,
          window: "day",
          resets_at: new Date(nextMidnight(Date.now())).toISOString()
        })
        const set = yield* setQuota(s.tenantId, "runs_per_day", 10)
        expect(set.status, set.text).toBe(200)
        expect(set.body).toMatchObject({ object: "quota", name: "runs_per_day", limit: 10, used: 0, window: "day" })

        const replies = yield* concurrentRuns(s, 64)
        const admitted = replies.filter((r) => r.status === 202)
        const refused = replies.filter((r) => r.status === 429)
        expect(admitted.length).toBe(10)
        expect(refused.length).toBe(54)
        const untilMidnight = (nextMidnight(Date.now()) - Date.now()) / 1000
        for (const r of refused) {
          expectError(r, 429, "rate_limited", "quota_exceeded")
          expect(r.body.error.message).toContain("runs_per_day")
          expect(Math.abs(Number(r.headers.get("retry-after")) - untilMidnight)).toBeLessThan(30)
        }
        // nothing of a refused admission was written
        expect(yield* runsOfCell(s.tenantId)).toEqual({ runs: 10, events: expect.any(Number) })
        const quotas = yield* quotasOf(s.P, s.key)
        expect(quotas.runs_per_day.used).toBe(10)

        // a refused request is not stored: the same Idempotency-Key admits once the limit is raised
        const conversation = yield* s.conversation()
        expectErrorCode(yield* s.startRun(conversation.id, "again", { idempotencyKey: "retry-me" }), 429, "quota_exceeded")
        expect((yield* setQuota(s.tenantId, "runs_per_day", 11)).status).toBe(200)
        expectSingle(yield* s.startRun(conversation.id, "again", { idempotencyKey: "retry-me" }), 202)
        expect((yield* quotasOf(s.P, s.key)).runs_per_day).toMatchObject({ limit: 11, used: 11 })
        expect((yield* runsOfCell(s.tenantId)).runs).toBe(11)
      }))

    it.effect("64 concurrent runs against concurrent_runs = 5: exactly 5 admitted; a finished run makes room for one", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "late" }])
        expect((yield* setQuota(s.tenantId, "concurrent_runs", 5)).status).toBe(200)
        const replies = yield* concurrentRuns(s, 64)
        const admitted = replies.filter((r) => r.status === 202).map((r) => r.body.data.id as string)
        expect(admitted.length).toBe(5)
        const refused = replies.filter((r) => r.status === 429)
        expect(refused.length).toBe(59)
        for (const r of refused) {
          expectErrorCode(r, 429, "quota_exceeded")
          expect(r.body.error.message).toContain("concurrent_runs")
          expect(r.headers.get("retry-after")).toBe("1")
        }
        expect((yield* quotasOf(s.P, s.key)).concurrent_runs).toMatchObject({ limit: 5, used: 5, window: null, resets_at: null })

        const other = yield* s.conversation()
        expectErrorCode(yield* s.startRun(other.id), 429, "quota_exceeded")
        expectSingle(yield* request("POST", `${s.P}/runs/${admitted[0]}/cancel`, { key: s.key }), 202)
        yield* eventually(s.getRun(admitted[0]!), (r) => isTerminal(r.status))
        expect((yield* quotasOf(s.P, s.key)).concurrent_runs.used).toBe(4)
        expectSingle(yield* s.startRun(other.id), 202)
        expect((yield* quotasOf(s.P, s.key)).concurrent_runs.used).toBe(5)
        for (const id of admitted.slice(1)) yield* request("POST", `${s.P}/runs/${id}/cancel`, { key: s.key })
      }))

    it.effect("tokens_per_day: once the day's model calls reach it no run is admitted; used equals the records' sum", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "one two three four five six" }])
        expect((yield* setQuota(s.tenantId, "tokens_per_day", 8)).status).toBe(200)
        const first = yield* s.conversation()
        const run = expectSingle(yield* s.startRun(first.id, "alpha beta"), 202)
        const ended = yield* eventually(s.getRun(run.id), (r) => isTerminal(r.status))
        expect(ended.status).toBe("succeeded")
        const records = expectList(yield* request("GET", `${s.P}/records?run_id=${run.id}`, { key: s.key })).items
        const spent = records.reduce((sum: number, r: any) => sum + r.input_tokens + r.output_tokens, 0)
        expect(spent).toBe(ended.usage.input_tokens + ended.usage.output_tokens)
        expect(spent).toBeGreaterThanOrEqual(8)
        expect((yield* quotasOf(s.P, s.key)).tokens_per_day).toMatchObject({ limit: 8, used: spent, window: "day" })
        const refused = yield* s.startRun((yield* s.conversation()).id)
        expectErrorCode(refused, 429, "quota_exceeded")
        expect(refused.body.error.message).toContain("tokens_per_day")
        // raised above what is used: admitted again
        expect((yield* setQuota(s.tenantId, "tokens_per_day", spent + 1)).status).toBe(200)
        expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
      }))

    it.effect("storage_bytes: an upload that does not fit is 429; a deleted file gives its bytes back", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const key = (yield* createKey(s.tenantId, ["files:read", "files:write", "usage:read"], "files")).secret
        expect((yield* setQuota(s.tenantId, "storage_bytes", 1000)).status).toBe(200)
        const first = expectSingle(yield* upload(s.P, key, Buffer.alloc(600, 1)), 201)
        const over = yield* upload(s.P, key, Buffer.alloc(401, 2))
        expectErrorCode(over, 429, "quota_exceeded")
        expect(over.headers.get("retry-after")).toBe("60")
        expect(over.body.error.message).toContain("storage_bytes")
        expect((yield* quotasOf(s.P, key)).storage_bytes).toMatchObject({ limit: 1000, used: 600, window: null })
        const exact = expectSingle(yield* upload(s.P, key, Buffer.alloc(400, 3)), 201)
        expect((yield* quotasOf(s.P, key)).storage_bytes.used).toBe(1000)
        expectSingle(yield* request("DELETE", `${s.P}/files/${first.id}`, { key }))
        expect((yield* quotasOf(s.P, key)).storage_bytes.used).toBe(400)
        expectSingle(yield* upload(s.P, key, Buffer.alloc(600, 4)), 201)
        expectSingle(yield* request("DELETE", `${s.P}/files/${exact.id}`, { key }))
        expect((yield* quotasOf(s.P, key)).storage_bytes.used).toBe(600)
      }))

    it.effect("storage_bytes holds for run outputs (D20): a file that does not fit is reported quota_exceeded, not stored; the run goes on", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([
          { type: "file", filename: "big.txt", content: "x".repeat(100) },
          { type: "file", filename: "small.txt", content: "fits" },
          { type: "text", text: "done" }
        ])
        const key = (yield* createKey(s.tenantId, ["files:read", "usage:read"], "files")).secret
        expect((yield* setQuota(s.tenantId, "storage_bytes", 50)).status).toBe(200)
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id, "hi", { headers: { prefer: "wait=10" } }))
        expect(run.status).toBe("succeeded")
        const events = (yield* s.events(run.id)).items
        const failed = events.filter((e) => e.type === "run.file.failed")
        expect(failed).toHaveLength(1)
        expect(failed[0].data).toMatchObject({ filename: "big.txt", bytes: 100, error: { type: "quota_exceeded" } })
        expect(failed[0].data.error.message).toContain("storage_bytes")
        const created = events.filter((e) => e.type === "run.file.created")
        expect(created.map((e) => e.data)).toEqual([{ file_id: expect.any(String), filename: "small.txt", bytes: 4 }])
        expect(events.map((e) => e.type).slice(-4)).toEqual(["run.file.failed", "run.file.created", "run.message", "run.succeeded"])
        const files = expectList(yield* request("GET", `${s.P}/files`, { key })).items
        expect(files.map((f: any) => f.filename)).toEqual(["small.txt"])
        expect((yield* quotasOf(s.P, key)).storage_bytes).toMatchObject({ limit: 50, used: 4 })
      }))

    it.effect("operators: list and set; 0 admits nothing; unknown quota, bad limits, unknown environments, no token are refused", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const listed = yield* operator("GET", `/tenants/${s.tenantId}/environments/sandbox/quotas`)
        expect(listed.status, listed.text).toBe(200)
        expect(listed.body.items.map((q: any) => [q.name, q.limit])).toEqual(
          Object.entries(defaultQuotaDefaults.sandbox)
        )
        expect(listed.body.items).toEqual(Object.values(yield* quotasOf(s.P, s.key)))

        expect((yield* setQuota(s.tenantId, "runs_per_day", 0)).body).toMatchObject({ name: "runs_per_day", limit: 0, used: 0 })
        const refused = yield* s.startRun((yield* s.conversation()).id)
        expectErrorCode(refused, 429, "quota_exceeded")
        expect(refused.body.error.message).toContain("runs_per_day")
        expect((yield* runsOfCell(s.tenantId)).runs).toBe(0)

        expectError(yield* setQuota(s.tenantId, "runs_per_week", 5), 400, "invalid_request", undefined, "name")
        for (const limit of [-1, 1.5, "10", null, Number.MAX_SAFE_INTEGER + 2]) {
          expectErrorCode(yield* setQuota(s.tenantId, "runs_per_day", limit), 400)
        }
        expectErrorCode(
          yield* operator("PUT", `/tenants/${s.tenantId}/environments/sandbox/quotas/runs_per_day`, { limit: 3, extra: 1 }),
          400
        )
        expectErrorCode(yield* setQuota("ten_unknown", "runs_per_day", 5), 404)
        expectErrorCode(yield* setQuota(s.tenantId, "runs_per_day", 5, "production"), 404)
        expectErrorCode(
          yield* request("PUT", `/operator/v1/tenants/${s.tenantId}/environments/sandbox/quotas/runs_per_day`, { body: { limit: 5 } }),
          401
        )
        // a service key cannot set quotas, and reading them needs usage:read
        const noUsage = (yield* createKey(s.tenantId, ["runs:read"], "runs-only")).secret
        expectErrorCode(yield* request("GET", `${s.P}/quotas`, { key: noUsage }), 403, "missing_scope")
        expectErrorCode(
          yield* request("PUT", `/operator/v1/tenants/${s.tenantId}/environments/sandbox/quotas/runs_per_day`, {
            key: s.key,
            body: { limit: 5 }
          }),
          401
        )
      }))

    it.effect("the operator CLI: set-quota and quotas (plain text, --json), each with --help", () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const [help, set, listed, bad] = yield* Effect.all([
          cli(["set-quota", "--help"]),
          cli(["set-quota", "--tenant", s.tenantId, "runs_per_day", "7"]),
          cli(["quotas", "--tenant", s.tenantId, "--json"]),
          cli(["set-quota", "--tenant", s.tenantId, "runs_per_week", "7"])
        ], { concurrency: "unbounded" })
        expect(help.code, help.stderr).toBe(0)
        expect(help.stdout).toContain("runs_per_day, concurrent_runs, tokens_per_day, storage_bytes, webhook_endpoints, schedules")
        expect(help.stdout).toContain("--tenant")
        expect(set.code, set.stderr).toBe(0)
        expect(set.stdout).toMatch(/^name: runs_per_day$/m)
        expect(set.stdout).toMatch(/^limit: 7$/m)
        expect(set.stdout).not.toContain("{")
        expect(listed.code, listed.stderr).toBe(0)
        expect(JSON.parse(listed.stdout).items.map((q: any) => q.name)).toEqual(
          ["runs_per_day", "concurrent_runs", "tokens_per_day", "storage_bytes", "webhook_endpoints", "schedules"]
        )
        expect(bad.code).not.toBe(0)
        expect((yield* quotasOf(s.P, s.key)).runs_per_day.limit).toBe(7)
      }))
  }
)
