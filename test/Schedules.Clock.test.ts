/**
 * The scheduler on TestClock (D15): an every-second schedule fires once per second as the clock
 * advances, each time a run in a new conversation as the schedule's key, listed by
 * `GET .../schedules/{id}/runs` as `GET .../runs/{id}` shows it; an every-minute schedule fires
 * each minute, and after ten minutes with the service stopped only the latest missed time runs,
 * by a process that dies right after committing it: the restarted service's recovery starts the run. Daylight saving time in Europe/Berlin for `30 2 * * *`: on the
 * spring-forward day it runs at 03:30 CEST, on the fall-back day once, at 02:30 CEST (not again at
 * 02:30 CET); seven months stopped run once. A revoked key disables its schedule at its next due
 * time (`authorization_revoked`), with a `schedule.disabled` webhook event, and it fires no more.
 * Fair across environments (D20): with 10 schedules of one environment and one of another due at
 * once, the other's fires second (the environments take turns), not 11th.
 *
 * TestClock steps through every sleep on the way (time passes with the service running), so the
 * scheduler here sleeps until the next due time only (no poll), and other loops wake rarely.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Context, Effect, Layer, Option, Redacted, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AppConfig, defaultScheduleConfig } from "../src/Config/AppConfig.js"
import { DatabaseLive } from "../src/Database/Client.js"
import { UnitOfWorkLive } from "../src/Edge/UnitOfWork.js"
import { KeyCache } from "../src/Platform.js"
import { RunStoreSql } from "../src/Runs/Repo.js"
import { Schedules } from "../src/Schedules.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request, setSettings } from "./support/Client.js"
import { freshDatabase } from "./support/Database.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { advanceUntil, eventually, settle } from "./support/Waiting.js"
import { startReceiver, verify } from "./support/WebhookReceiver.js"
import { waitFor, WEBHOOK_SCOPES, webhookSettings } from "./support/WebhookSandbox.js"

const iso = (ms: number) => new Date(ms).toISOString()

const SETTINGS = { ...webhookSettings(), schedules: { ...defaultScheduleConfig, pollMillis: 365 * 86_400_000 } }
/** The service on `databaseUrl` for `body` (a restart: the same database, a new process's loops). */
const withApp = (databaseUrl: string) => <A, E, R>(body: Effect.Effect<A, E, R>) =>
  body.pipe(Effect.scoped, Effect.provide(makeTestApp(SETTINGS, databaseUrl)))

/** A scripted agent's sandbox, a key with the schedule scopes (it creates the schedules), and what the tests read. */
const scheduleSandbox = Effect.gen(function*() {
  const s = yield* scriptedSandbox([{ type: "text", text: "report: {{input}}" }])
  const scheduler = yield* createKey(s.tenantId, ["schedules:read", "schedules:write", "runs:read", "runs:write"], "scheduler")
  const call = (method: string, path: string, body?: unknown) =>
    request(method, `${s.P}${path}`, { key: scheduler.secret, ...(body === undefined ? {} : { body }) })
  const create = (cron: string, timezone = "UTC") =>
    Effect.map(
      call("POST", "/schedules", {
        workspace_id: s.ws.id,
        agent_revision_id: s.rev.id,
        cron,
        timezone,
        input: [{ type: "text", text: "daily" }]
      }),
      (r) => expectSingle(r, 201)
    )
  const get = (id: string) => Effect.map(call("GET", `/schedules/${id}`), (r) => expectSingle(r))
  /** The scheduled times that started a run, oldest first. */
  const firings = (id: string) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.map(
        Effect.orDie(sql<{ scheduled_at: Date; run_id: string }>`
          SELECT scheduled_at, run_id FROM schedule_firings WHERE schedule_id = ${id} ORDER BY scheduled_at`),
        (rows) => rows.map((r) => ({ at: r.scheduled_at.toISOString(), runId: r.run_id }))
      ))
  return { ...s, scheduler, call, create, get, firings }
})

const T0 = Date.UTC(2026, 0, 5, 10, 0, 0) // a Monday, 10:00:00 UTC

/**
 * One firing transaction at the Clock's now, as a process runs it that dies right after the commit:
 * the run is admitted, and no cell of any process is told to start it.
 */
const fireAndDie = (databaseUrl: string) =>
  Effect.gen(function*() {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-fire-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dataDir, { recursive: true, force: true })))
    const config = AppConfig.defaults({ ...SETTINGS, databaseUrl: Option.some(Redacted.make(databaseUrl)), dataDir, dbPoolSize: 2 })
    const schedules = yield* Layer.build(
      Schedules.Default.pipe(
        Layer.provide(RunStoreSql),
        Layer.provide(UnitOfWorkLive),
        Layer.provide(KeyCache.Default),
        Layer.provideMerge(DatabaseLive),
        Layer.provide(Layer.succeed(AppConfig, config))
      )
    )
    return yield* Context.get(schedules, Schedules).fireNext(new Date(yield* Clock.currentTimeMillis))
  }).pipe(Effect.scoped)

describe("the scheduler on TestClock (D15)", () => {
  it.effect(
    "every second: one run per second in a new conversation; every minute, and 10 minutes stopped: only the latest runs",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const db = yield* freshDatabase
        const { minute, s } = yield* withApp(db.url)(Effect.gen(function*() {
          const s = yield* scheduleSandbox
          yield* setSettings(s.tenantId, { schedule_min_interval_seconds: 1 }) // D20: 60 unless the operator lowers it
          const every = yield* s.create("* * * * * *")
          expect(every.next_run_at).toBe(iso(T0 + 1000))
          for (let i = 1; i <= 5; i++) {
            yield* TestClock.adjust("1 second")
            yield* eventually(s.firings(every.id), (f) => f.length >= i)
          }
          expectSingle(yield* s.call("PATCH", `/schedules/${every.id}`, { enabled: false }))
          const fired = yield* s.firings(every.id)
          expect(fired.map((f) => f.at)).toEqual([1, 2, 3, 4, 5].map((i) => iso(T0 + i * 1000)))

          // each a run of the revision in a conversation of its own, as the schedule's key, listed newest first
          const runs = fired.map((f) => f.runId).reverse()
          const ended = yield* eventually(
            Effect.forEach(runs, (id) => s.getRun(id)),
            (all) => all.every((r) => isTerminal(r.status))
          )
          expect(ended.map((r) => r.status)).toEqual(runs.map(() => "succeeded"))
          expect(ended[0]!.output).toEqual([{ type: "text", text: "report: daily" }])
          expect(new Set(ended.map((r) => r.conversation_id)).size).toBe(5)
          const sql = yield* SqlClient.SqlClient
          const keys = yield* Effect.orDie(sql<{ key_id: string }>`SELECT DISTINCT key_id FROM runs WHERE id IN ${sql.in(runs)}`)
          expect(keys.map((k) => k.key_id)).toEqual([s.scheduler.id])
          const pages: Array<any> = []
          let cursor = ""
          do {
            const page = expectList(yield* s.call("GET", `/schedules/${every.id}/runs?limit=2&cursor=${cursor}`))
            pages.push(...page.items)
            cursor = page.next_cursor ?? ""
          } while (cursor !== "")
          expect(pages.map((r) => r.id)).toEqual(runs)
          expect(pages.map((r) => r.scheduled_at)).toEqual(fired.map((f) => f.at).reverse())
          expect(pages.map(({ scheduled_at: _, ...run }) => run)).toEqual(ended)
          expect(yield* s.get(every.id)).toMatchObject({ last_run_at: iso(T0 + 5000), last_run_id: runs[0], next_run_at: null })

          // every minute: each due time as the clock passes it
          const minute = yield* s.create("* * * * *")
          expect(minute.next_run_at).toBe(iso(T0 + 60_000))
          yield* TestClock.adjust("55 seconds")
          yield* eventually(s.firings(minute.id), (f) => f.length >= 1)
          yield* TestClock.adjust("1 minute")
          yield* eventually(s.firings(minute.id), (f) => f.length >= 2)
          return { minute, s }
        }))
        // the service stopped for ten minutes; a process fires the latest missed time, once, and dies right after the
        // commit (no cell was told); the restarted service's recovery starts the run
        yield* TestClock.adjust("10 minutes")
        expect(yield* fireAndDie(db.url)).toMatchObject({ _tag: "Fired", scheduleId: minute.id, scheduledAt: new Date(T0 + 12 * 60_000) })
        expect(yield* fireAndDie(db.url)).toBeUndefined()
        yield* withApp(db.url)(Effect.gen(function*() {
          for (let i = 0; i < 5; i++) yield* settle
          const byMinute = yield* s.firings(minute.id)
          expect(byMinute.map((f) => f.at)).toEqual([1, 2, 12].map((m) => iso(T0 + m * 60_000)))
          expect(yield* s.get(minute.id)).toMatchObject({
            last_run_at: iso(T0 + 12 * 60_000),
            last_run_id: byMinute[2]!.runId,
            next_run_at: iso(T0 + 13 * 60_000)
          })
          expect((yield* eventually(s.getRun(byMinute[2]!.runId), (r) => isTerminal(r.status))).status).toBe("succeeded")
        }))
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "Europe/Berlin 02:30 daily: 03:30 on the spring-forward day, once on the fall-back day; 7 months stopped run once",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.parse("2026-03-28T12:00:00Z"))
        const db = yield* freshDatabase
        const lastRun = (s: Effect.Effect.Success<typeof scheduleSandbox>, id: string, at: string) =>
          advanceUntil("2 hours", s.get(id), (d) => d.last_run_at === at)
        const { daily, s } = yield* withApp(db.url)(Effect.gen(function*() {
          const s = yield* scheduleSandbox
          const daily = yield* s.create("30 2 * * *", "Europe/Berlin")
          // 02:30 does not exist on 29 March (02:00 CET -> 03:00 CEST): 03:30 CEST
          expect(daily.next_run_at).toBe("2026-03-29T01:30:00.000Z")
          expect((yield* lastRun(s, daily.id, "2026-03-29T01:30:00.000Z")).next_run_at).toBe("2026-03-30T00:30:00.000Z")
          return { daily, s }
        }))
        // seven months with the service stopped: the latest missed day runs, once
        yield* TestClock.setTime(Date.parse("2026-10-24T12:00:00Z"))
        yield* withApp(db.url)(Effect.gen(function*() {
          const caughtUp = yield* lastRun(s, daily.id, "2026-10-24T00:30:00.000Z")
          // 25 October: 03:00 CEST -> 02:00 CET, 02:30 happens twice: the first (CEST) runs
          expect(caughtUp.next_run_at).toBe("2026-10-25T00:30:00.000Z")
          expect((yield* lastRun(s, daily.id, "2026-10-25T00:30:00.000Z")).next_run_at).toBe("2026-10-26T01:30:00.000Z")
          yield* lastRun(s, daily.id, "2026-10-26T01:30:00.000Z")
          expect((yield* s.firings(daily.id)).map((f) => f.at)).toEqual([
            "2026-03-29T01:30:00.000Z",
            "2026-10-24T00:30:00.000Z",
            "2026-10-25T00:30:00.000Z",
            "2026-10-26T01:30:00.000Z"
          ])
        }))
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a revoked key: the schedule is disabled at its next due time, with a schedule.disabled webhook, and fires no more",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        yield* Effect.gen(function*() {
          const receiver = yield* startReceiver()
          const s = yield* scheduleSandbox
          const admin = (yield* createKey(
            s.tenantId,
            ["keys:revoke", "schedules:read", "schedules:write", "runs:read", "runs:write", ...WEBHOOK_SCOPES],
            "admin"
          ))
            .secret
          const asAdmin = (method: string, path: string, body?: unknown) =>
            request(method, `${s.P}${path}`, { key: admin, ...(body === undefined ? {} : { body }) })
          const endpoint = expectSingle(
            yield* asAdmin("POST", "/webhook-endpoints", { url: receiver.url, event_types: ["schedule.disabled"] }),
            201
          )
          const minute = yield* s.create("* * * * *")
          yield* TestClock.adjust("1 minute")
          yield* eventually(s.firings(minute.id), (f) => f.length >= 1)

          expectSingle(yield* asAdmin("POST", `/api-keys/${s.scheduler.id}/revoke`))
          // not due yet: still active until its next due time
          expect((yield* asAdmin("GET", `/schedules/${minute.id}`)).body.data.status).toBe("active")
          const disabled = yield* advanceUntil(
            "20 seconds",
            Effect.map(asAdmin("GET", `/schedules/${minute.id}`), (r) => expectSingle(r)),
            (d) => d.status === "disabled"
          )
          expect(disabled).toMatchObject({ status: "disabled", status_reason: "authorization_revoked", enabled: true, next_run_at: null })
          yield* waitFor(Effect.sync(() => receiver.received.length), (n) => n >= 1)
          const body = yield* verify(endpoint.secret, receiver.received[0]!)
          expect(body).toMatchObject({ type: "schedule.disabled", tenant_id: s.tenantId, environment: "sandbox", data: disabled })
          const deliveries = expectList(yield* asAdmin("GET", "/webhook-deliveries")).items
          expect(deliveries.map((d) => d.event_type)).toEqual(["schedule.disabled"])

          yield* TestClock.adjust("5 minutes")
          for (let i = 0; i < 5; i++) yield* settle
          expect(yield* s.firings(minute.id)).toHaveLength(1)
          expectError(
            yield* asAdmin("PATCH", `/schedules/${minute.id}`, { enabled: true }),
            409,
            "conflict",
            "schedule_disabled"
          )
          expect((yield* asAdmin("GET", `/schedules/${minute.id}`)).body.data).toEqual(disabled)
        }).pipe(Effect.scoped, Effect.provide(makeTestApp(SETTINGS)))
      }),
    60_000
  )

  it.effect("a schedule whose firing fails skips that time and holds up no other schedule", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const s = yield* scheduleSandbox
        const broken = yield* s.create("* * * * *")
        const fine = yield* s.create("0 * * * * *")
        // the broken schedule's firings fail inside the database (its transaction rolls back)
        yield* sql.unsafe(`
          CREATE FUNCTION refuse_firing() RETURNS trigger AS $$
          BEGIN RAISE EXCEPTION 'firing refused for test'; END $$ LANGUAGE plpgsql`).pipe(Effect.orDie)
        yield* sql.unsafe(`
          CREATE TRIGGER refuse_firing BEFORE INSERT ON schedule_firings FOR EACH ROW
          WHEN (NEW.schedule_id = '${broken.id}') EXECUTE FUNCTION refuse_firing()`).pipe(Effect.orDie)
        yield* TestClock.adjust("1 minute")
        yield* eventually(s.firings(fine.id), (f) => f.length >= 1)
        expect((yield* s.firings(fine.id)).map((f) => f.at)).toEqual([iso(T0 + 60_000)])
        const skipped = yield* eventually(s.get(broken.id), (b) => b.next_run_at === iso(T0 + 120_000))
        expect(skipped).toMatchObject({ status: "active", last_run_at: null, next_run_at: iso(T0 + 120_000) })
        expect(yield* s.firings(broken.id)).toEqual([])
        const runs = yield* Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM runs`)
        expect(runs[0]!.n).toBe(1) // nothing of the rolled-back firing stays
      }).pipe(Effect.provide(makeTestApp(SETTINGS)))
    }), 60_000)

  it.effect(
    "fair across environments: 10 schedules of one and 1 of another due at once, the other's fires second, not 11th",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(T0)
        const db = yield* freshDatabase
        const { busy, quiet } = yield* withApp(db.url)(Effect.gen(function*() {
          const busy = yield* scheduleSandbox
          const quiet = yield* scheduleSandbox
          const many = yield* Effect.forEach(Array.from({ length: 10 }), () => busy.create("* * * * *"), { concurrency: 4 })
          // due a second after the busy environment's: the earliest-first order of before fired it last
          const one = yield* quiet.create("1 1 * * * *") // 10:01:01
          return { busy: many.map((m) => m.id), quiet: one.id }
        }))
        // the service stopped for two minutes: every schedule is due when it starts again
        yield* TestClock.adjust("2 minutes")
        yield* withApp(db.url)(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const fired = Effect.map(
            Effect.orDie(sql<{ schedule_id: string }>`SELECT schedule_id FROM schedule_firings ORDER BY run_id`),
            (rows) => rows.map((r) => r.schedule_id)
          )
          // run ids are made in the order of the firings (one process: monotonic ids)
          const order = yield* eventually(fired, (ids) => ids.length === 11)
          expect(order.indexOf(quiet)).toBe(1)
          expect(new Set(order.filter((id) => id !== quiet))).toEqual(new Set(busy))
        }))
      }).pipe(Effect.scoped),
    60_000
  )
})
