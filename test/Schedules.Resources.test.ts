/**
 * Schedules as resources (D15): create (defaults, `next_run_at` the first time after now, an
 * idempotent replay), get, D6 lists, PATCH (pause, resume and a new cron or zone recompute
 * `next_run_at`), DELETE; the cron forms croner reads and those refused (400 `invalid_cron`,
 * `invalid_timezone`), a revision or workspace of no one's (404 as a missing id), the run input's
 * own limits; scopes `schedules:read`/`schedules:write` (and `runs:read` for the runs a schedule
 * started); another tenant's schedule is 404. D20: creating or enabling one needs `runs:write`; a
 * cron firing more often than the environment's `schedule_min_interval_seconds` (60, the operator
 * lowers it) is 400 `parameter_invalid`; 102 created at once against the `schedules` quota (100):
 * exactly 100, the others 429 with nothing stored; migration 0025 disables a schedule whose key lacks
 * `runs:write` (made before D20). The schedules here fire on 1 January only (or
 * are paused): nothing fires during the suite.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import environmentLimits from "../src/Database/migrations/0025_environment_limits.js"
import { shortestGapSeconds } from "../src/Schedules/Cron.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request, setSettings } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle, keysOf } from "./support/Envelopes.js"
import { scriptedSandbox } from "./support/Sandboxes.js"

const SCHEDULE_FIELDS = [
  "agent_revision_id",
  "created_at",
  "cron",
  "enabled",
  "id",
  "input",
  "last_run_at",
  "last_run_id",
  "next_run_at",
  "object",
  "status",
  "status_reason",
  "timezone",
  "updated_at",
  "workspace_id"
]
const YEARLY = "0 9 1 1 *"
const INPUT = [{ type: "text", text: "daily report" }]

/** A scripted agent's sandbox with a key holding the schedule scopes. */
const scheduleSandbox = Effect.gen(function*() {
  const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
  const scheduler = yield* createKey(s.tenantId, ["schedules:read", "schedules:write", "runs:read", "runs:write"], "scheduler")
  const key = scheduler.secret
  const call = (method: string, path: string, body?: unknown, idempotencyKey?: string) =>
    request(method, `${s.P}${path}`, {
      key,
      ...(body === undefined ? {} : { body }),
      ...(idempotencyKey === undefined ? {} : { idempotencyKey })
    })
  const body = (extra: Record<string, unknown> = {}) => ({
    workspace_id: s.ws.id,
    agent_revision_id: s.rev.id,
    cron: YEARLY,
    input: INPUT,
    ...extra
  })
  return { ...s, scheduleKey: key, scheduleKeyId: scheduler.id, call, body }
})

/** The next 1 January, 09:00 in `offsetHours` east of UTC (no DST in January in the zones used). */
const nextJanuaryFirst = (offsetHours: number) => {
  const now = new Date()
  const at = (year: number) => Date.UTC(year, 0, 1, 9 - offsetHours)
  return new Date(at(now.getUTCFullYear()) > now.getTime() ? at(now.getUTCFullYear()) : at(now.getUTCFullYear() + 1)).toISOString()
}

layer(makeTestApp(), { excludeTestServices: true, timeout: "60 seconds" })("schedules (D15)", (it) => {
  it.effect("create, replay, get, list with cursors, pause, resume, a new cron and zone, delete", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const created = yield* s.call("POST", "/schedules", s.body(), "create-schedule")
      const schedule = expectSingle(created, 201)
      expect(keysOf(schedule)).toEqual(SCHEDULE_FIELDS)
      expect(schedule).toMatchObject({
        object: "schedule",
        workspace_id: s.ws.id,
        agent_revision_id: s.rev.id,
        cron: YEARLY,
        timezone: "UTC",
        input: INPUT,
        enabled: true,
        status: "active",
        status_reason: null,
        next_run_at: nextJanuaryFirst(0),
        last_run_at: null,
        last_run_id: null
      })
      expect(schedule.id).toMatch(/^sched_/)
      const replayed = yield* s.call("POST", "/schedules", s.body(), "create-schedule")
      expect(replayed.headers.get("idempotent-replayed")).toBe("true")
      expect(replayed.body.data).toEqual(schedule)
      expect(expectSingle(yield* s.call("GET", `/schedules/${schedule.id}`))).toEqual(schedule)

      const second = expectSingle(yield* s.call("POST", "/schedules", s.body({ cron: "@hourly", enabled: false })), 201)
      expect(second).toMatchObject({ cron: "@hourly", enabled: false, status: "paused", next_run_at: null })
      const first = expectList(yield* s.call("GET", "/schedules?limit=1"))
      expect(first.items.map((i) => i.id)).toEqual([second.id])
      const rest = expectList(yield* s.call("GET", `/schedules?limit=1&cursor=${first.next_cursor}`))
      expect(rest.items.map((i) => i.id)).toEqual([schedule.id])
      expect(rest.next_cursor).toBeNull()
      expectErrorCode(yield* s.call("GET", "/schedules?cursor=bogus"), 400, "invalid_cursor")

      // pause, resume: `next_run_at` goes and comes back; a new cron and zone: computed from now
      const paused = expectSingle(yield* s.call("PATCH", `/schedules/${schedule.id}`, { enabled: false }))
      expect(paused).toMatchObject({ enabled: false, status: "paused", next_run_at: null })
      const resumed = expectSingle(yield* s.call("PATCH", `/schedules/${schedule.id}`, { enabled: true }))
      expect(resumed).toMatchObject({ enabled: true, status: "active", next_run_at: nextJanuaryFirst(0) })
      const moved = expectSingle(
        yield* s.call("PATCH", `/schedules/${schedule.id}`, {
          cron: "0 0 9 1 1 *",
          timezone: "Asia/Tokyo",
          input: [{ type: "text", text: "x" }]
        })
      )
      expect(moved).toMatchObject({ cron: "0 0 9 1 1 *", timezone: "Asia/Tokyo", input: [{ type: "text", text: "x" }] })
      expect(moved.next_run_at).toBe(nextJanuaryFirst(9))
      expect(Date.parse(moved.updated_at)).toBeGreaterThanOrEqual(Date.parse(schedule.updated_at))
      expectError(yield* s.call("PATCH", `/schedules/${schedule.id}`, {}), 400, "invalid_request", "parameter_missing")
      expectError(yield* s.call("PATCH", `/schedules/${schedule.id}`, { cron: "* * *" }), 400, "invalid_request", "invalid_cron", "cron")
      expect(expectSingle(yield* s.call("GET", `/schedules/${schedule.id}`))).toEqual(moved)

      expect(expectSingle(yield* s.call("DELETE", `/schedules/${schedule.id}`))).toEqual({
        id: schedule.id,
        object: "schedule",
        deleted: true
      })
      const missing = yield* s.call("GET", `/schedules/${schedule.id}`)
      expectError(missing, 404, "not_found", "resource_missing", "schedule_id")
      expectErrorCode(yield* s.call("DELETE", `/schedules/${schedule.id}`), 404, "resource_missing")
      expectErrorCode(yield* s.call("GET", `/schedules/${schedule.id}/runs`), 404, "resource_missing")
      expect(expectList(yield* s.call("GET", `/schedules/${second.id}/runs`))).toMatchObject({ items: [], next_cursor: null })
    }))

  it.effect("cron forms: 5 fields, 6 with seconds, nicknames; refused: other forms, unknown zones, no revision or workspace", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      for (const cron of ["*/15 9-17 * * MON-FRI", "30 0 9 1 1 *", "@daily", "@Weekly", "0 12 L * *"]) {
        expect(expectSingle(yield* s.call("POST", "/schedules", s.body({ cron })), 201).cron, cron).toBe(cron)
      }
      const zoned = expectSingle(yield* s.call("POST", "/schedules", s.body({ timezone: "America/New_York" })), 201)
      expect(zoned.next_run_at).toBe(nextJanuaryFirst(-5))
      for (
        const cron of ["* * *", "* * * * * * *", "61 * * * *", "@reboot", "@every 5s", "2030-01-01T00:00:00", "*/0 * * * *", "0 0 30 2 *"]
      ) {
        expectError(yield* s.call("POST", "/schedules", s.body({ cron })), 400, "invalid_request", "invalid_cron", "cron")
      }
      for (const timezone of ["Mars/Base", "+01:00", "UTC+1", "Europe/"]) {
        expectError(yield* s.call("POST", "/schedules", s.body({ timezone })), 400, "invalid_request", "invalid_timezone", "timezone")
      }
      // a revision or workspace that does not exist here: 404, the body of a missing id
      const other = yield* scheduleSandbox
      for (const revision of ["rev_nope", other.rev.id]) {
        expectError(
          yield* s.call("POST", "/schedules", s.body({ agent_revision_id: revision })),
          404,
          "not_found",
          "resource_missing",
          "agent_revision_id"
        )
      }
      expectError(
        yield* s.call("POST", "/schedules", s.body({ workspace_id: other.ws.id })),
        404,
        "not_found",
        "resource_missing",
        "workspace_id"
      )
      // the run input's own rules: its schema, and 100,000 characters per text item
      expectErrorCode(yield* s.call("POST", "/schedules", s.body({ input: [] })), 400, "parameter_invalid")
      expectError(
        yield* s.call("POST", "/schedules", s.body({ input: [{ type: "text", text: "x".repeat(100_001) }] })),
        400,
        "invalid_request",
        "input_too_large",
        "input.0.text"
      )
      expectError(
        yield* s.call("POST", "/schedules", s.body({ input: [{ type: "file", file_id: "file_nope" }] })),
        404,
        "not_found",
        "resource_missing",
        "input.0.file_id"
      )
      expectError(yield* s.call("POST", "/schedules", s.body({ every: "day" })), 400, "invalid_request", "unknown_parameter", "every")
      expect(expectList(yield* s.call("GET", "/schedules")).items).toHaveLength(6)
    }))

  it.effect("scopes: reads need schedules:read, changes schedules:write; another tenant's schedule is 404", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const schedule = expectSingle(yield* s.call("POST", "/schedules", s.body()), 201)
      const reader = (yield* createKey(s.tenantId, ["schedules:read"], "reader")).secret
      const as = (key: string, method: string, path: string, body?: unknown) =>
        request(method, `${s.P}${path}`, { key, ...(body === undefined ? {} : { body }) })
      for (const path of ["/schedules", `/schedules/${schedule.id}`, `/schedules/${schedule.id}/runs`]) {
        expectError(yield* as(s.key, "GET", path), 403, "permission_error", "missing_scope")
      }
      for (const path of ["/schedules", `/schedules/${schedule.id}`]) expect((yield* as(reader, "GET", path)).status, path).toBe(200)
      // the runs it started hold what agents said: runs:read too
      expectError(yield* as(reader, "GET", `/schedules/${schedule.id}/runs`), 403, "permission_error", "missing_scope")
      expect((yield* request("GET", `${s.P}/schedules/${schedule.id}/runs`, { key: s.scheduleKey })).status).toBe(200)
      for (
        const [method, path, body] of [
          ["POST", "/schedules", s.body()],
          ["PATCH", `/schedules/${schedule.id}`, { enabled: false }],
          ["DELETE", `/schedules/${schedule.id}`, undefined]
        ] as const
      ) {
        expectError(yield* as(reader, method, path, body), 403, "permission_error", "missing_scope")
      }
      const other = yield* scheduleSandbox
      const missing = yield* other.call("GET", `/schedules/sched_nope`)
      const foreign = yield* other.call("GET", `/schedules/${schedule.id}`)
      expectError(foreign, 404, "not_found", "resource_missing", "schedule_id")
      expect(foreign.body.error).toEqual(missing.body.error)
      expectErrorCode(yield* other.call("PATCH", `/schedules/${schedule.id}`, { enabled: false }), 404, "resource_missing")
      expectErrorCode(yield* other.call("DELETE", `/schedules/${schedule.id}`), 404, "resource_missing")
      expect(expectSingle(yield* s.call("GET", `/schedules/${schedule.id}`)).status).toBe("active")
    }))

  it.effect("D20: creating or enabling a schedule needs runs:write besides schedules:write; pausing or a new cron do not", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const writer = (yield* createKey(s.tenantId, ["schedules:read", "schedules:write"], "no-runs")).secret
      const as = (method: string, path: string, body: unknown) => request(method, `${s.P}${path}`, { key: writer, body })
      const refused = yield* as("POST", "/schedules", s.body())
      expectError(refused, 403, "permission_error", "missing_scope")
      expect(refused.body.error.message).toContain("runs:write")
      const paused = expectSingle(yield* s.call("POST", "/schedules", s.body({ enabled: false })), 201)
      const enabling = yield* as("PATCH", `/schedules/${paused.id}`, { enabled: true })
      expectError(enabling, 403, "permission_error", "missing_scope")
      expect(enabling.body.error.message).toContain("runs:write")
      expect(expectSingle(yield* as("PATCH", `/schedules/${paused.id}`, { cron: "0 10 1 1 *", enabled: false }))).toMatchObject({
        cron: "0 10 1 1 *",
        status: "paused"
      })
      expect(expectList(yield* s.call("GET", "/schedules")).items.map((i) => i.id)).toEqual([paused.id])
      expect(expectSingle(yield* s.call("PATCH", `/schedules/${paused.id}`, { enabled: true })).status).toBe("active")
    }))

  it.effect("D20: a cron firing more often than schedule_min_interval_seconds (60; the operator lowers it) is 400, param cron", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const tooOften = (cron: string, id?: string) =>
        Effect.map(
          id === undefined ? s.call("POST", "/schedules", s.body({ cron })) : s.call("PATCH", `/schedules/${id}`, { cron }),
          (r) => expectError(r, 400, "invalid_request", "parameter_invalid", "cron")
        )
      for (const cron of ["* * * * * *", "*/10 * * * * *", "0,30 * * * * *"]) yield* tooOften(cron)
      const minute = expectSingle(yield* s.call("POST", "/schedules", s.body({ cron: "* * * * *", enabled: false })), 201)
      expectSingle(yield* s.call("POST", "/schedules", s.body({ cron: "0 * * * * *", enabled: false })), 201)
      yield* tooOften("*/10 * * * * *", minute.id)
      expect(expectSingle(yield* s.call("GET", `/schedules/${minute.id}`)).cron).toBe("* * * * *")

      expect(yield* setSettings(s.tenantId, { schedule_min_interval_seconds: 10 })).toMatchObject({ schedule_min_interval_seconds: 10 })
      expect(expectSingle(yield* s.call("PATCH", `/schedules/${minute.id}`, { cron: "*/10 * * * * *" })).cron).toBe("*/10 * * * * *")
      expectSingle(yield* s.call("POST", "/schedules", s.body({ cron: "*/10 * * * * *", enabled: false })), 201)
      yield* tooOften("*/5 * * * * *")
      yield* tooOften("* * * * * *", minute.id)
    }))

  it.effect("the shortest gap of a cron: its time-of-day fields, across midnight too; the day fields and the zone do not count", () =>
    Effect.sync(() => {
      const cases: ReadonlyArray<readonly [string, number]> = [
        ["* * * * * *", 1],
        ["*/10 * * * * *", 10],
        ["0,50 * * * * *", 10], // 00:50 -> next minute's 00:00
        ["* * * * *", 60],
        ["*/15 9-17 * * MON-FRI", 900],
        ["@hourly", 3600],
        ["0,59 0,23 1 * *", 60], // 23:59 -> 00:00 as if the next day fired
        ["1,59 1,3 * * *", 3480], // 01:01 -> 01:59 (a spring-forward day brings 01:59 and 03:01 to 2 min once)
        ["@daily", 86_400],
        ["0 9 1 1 *", 86_400]
      ]
      for (const [cron, gap] of cases) expect(shortestGapSeconds(cron), cron).toBe(gap)
    }))

  it.effect("D20: at most 100 schedules per environment: 102 at once, exactly 100 made, 2 are 429 quota_exceeded", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const replies = yield* Effect.forEach(
        Array.from({ length: 102 }, (_, i) => i),
        (i) => s.call("POST", "/schedules", s.body({ input: [{ type: "text", text: `n${i}` }], enabled: false })),
        { concurrency: 16 }
      )
      expect(replies.filter((r) => r.status === 201)).toHaveLength(100)
      const refused = replies.filter((r) => r.status !== 201)
      expect(refused).toHaveLength(2)
      for (const r of refused) {
        expectError(r, 429, "rate_limited", "quota_exceeded")
        expect(r.headers.get("retry-after")).toBe("60")
      }
      const sql = yield* SqlClient.SqlClient
      const counts = Effect.map(
        Effect.orDie(sql<{ stored: number; used: number }>`
          SELECT (SELECT count(*)::int FROM schedules WHERE tenant_id = ${s.tenantId}) AS stored,
                 (SELECT schedules::int FROM quota_usage WHERE tenant_id = ${s.tenantId}) AS used`),
        ([row]) => row!
      )
      expect(yield* counts).toEqual({ stored: 100, used: 100 })
      // one deleted gives its place back
      const first = replies.find((r) => r.status === 201)!.body.data
      expectSingle(yield* s.call("DELETE", `/schedules/${first.id}`))
      expect(yield* counts).toEqual({ stored: 99, used: 99 })
      expectSingle(yield* s.call("POST", "/schedules", s.body({ enabled: false })), 201)
      expectError(yield* s.call("POST", "/schedules", s.body({ enabled: false })), 429, "rate_limited", "quota_exceeded")
    }))

  it.effect("migration 0025: a schedule whose creating key lacks runs:write (made before D20) is disabled, others stay", () =>
    Effect.gen(function*() {
      const s = yield* scheduleSandbox
      const other = yield* scheduleSandbox
      const legacy = expectSingle(yield* s.call("POST", "/schedules", s.body()), 201)
      const kept = expectSingle(yield* other.call("POST", "/schedules", other.body()), 201)
      const sql = yield* SqlClient.SqlClient
      // the key as a key without runs:write made it before D20 (keys' scopes never change), and the migration not yet run
      yield* Effect.orDie(sql`UPDATE api_keys SET scopes = array_remove(scopes, 'runs:write') WHERE id = ${s.scheduleKeyId}`)
      yield* Effect.orDie(sql`ALTER TABLE environment_settings DROP COLUMN schedule_min_interval_seconds`)
      yield* Effect.orDie(sql`DROP INDEX schedules_cell_due`)
      yield* Effect.orDie(environmentLimits)
      expect(expectSingle(yield* s.call("GET", `/schedules/${legacy.id}`))).toMatchObject({
        status: "disabled",
        status_reason: "authorization_revoked",
        next_run_at: null
      })
      expect(expectSingle(yield* other.call("GET", `/schedules/${kept.id}`))).toEqual(kept)
    }))
})
