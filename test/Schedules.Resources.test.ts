/**
 * Schedules as resources (D15): create (defaults, `next_run_at` the first time after now, an
 * idempotent replay), get, D6 lists, PATCH (pause, resume and a new cron or zone recompute
 * `next_run_at`), DELETE; the cron forms croner reads and those refused (400 `invalid_cron`,
 * `invalid_timezone`), a revision or workspace of no one's (404 as a missing id), the run input's
 * own limits; scopes `schedules:read`/`schedules:write` (and `runs:read` for the runs a schedule
 * started); another tenant's schedule is 404. The
 * schedules here fire on 1 January only: nothing fires during the suite.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
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
  const key = (yield* createKey(s.tenantId, ["schedules:read", "schedules:write", "runs:read"], "scheduler")).secret
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
  return { ...s, scheduleKey: key, call, body }
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
})
