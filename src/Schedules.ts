/**
 * Schedules (D15): a cron expression (src/Schedules/Cron.ts) in an IANA time zone that starts a run
 * of a pinned agent revision, each in a new conversation, as the key that created the schedule.
 *
 * Firing (`fireNext`, called by the scheduler loop of each process: src/Runtime/Scheduler.ts) is
 * one transaction per scheduled time: the due schedule locked (`FOR UPDATE SKIP LOCKED`), its key
 * checked, the firing (schedule_id, scheduled_at) claimed under its primary key, the conversation
 * and the run's admission (RunStore.admit: the run, its `run.queued` event and input item, as for
 * `POST .../runs`) written, and `next_run_at` moved past now. So a scheduled time starts exactly one
 * run across restarts and processes. After the commit the caller hands the run to its cell; a
 * process that dies before leaves a queued run, which recovery starts. Firings missed while no
 * process ran collapse to the latest one. A revoked key disables the schedule for good, with a
 * `schedule.disabled` webhook event in the same transaction. The scheduler takes the environments
 * with due schedules in turn (`dueCells`, then `fireNext` of each), so one environment's many due
 * schedules never hold up another's.
 *
 * Bounds per environment (D20): a schedule acts as a key that may start runs (`runs:write` to
 * create or enable one, checked by the API), its cron fires at most once in the environment's
 * `schedule_min_interval_seconds` (Cron.shortestGapSeconds), and the environment has at most its
 * `schedules` quota of them (counted by the statement that creates one).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Data, Effect, Either } from "effect"

import { Agents } from "./Agents.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError, isDatabaseUnavailable } from "./Database/Defects.js"
import type { QuotaName } from "./Domain/Quotas.js"
import { AUTHORIZATION_REVOKED, type CreateSchedule, type ScheduleStatus, type UpdateSchedule } from "./Domain/Schedules.js"
import { EnvironmentSettingsRepo } from "./EnvironmentSettings.js"
import { Files } from "./Files.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { makeId } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import { cellKey, type CellRef, type Principal } from "./Kernel/Principal.js"
import { traced } from "./Kernel/Spans.js"
import { Platform } from "./Platform.js"
import { quotaExceeded, QuotasRepo } from "./Quotas.js"
import { admittedInput, RunStore } from "./Runs.js"
import * as Cron from "./Schedules/Cron.js"
import { type ScheduleRow, SchedulesRepo, toSchedule, toScheduledRun } from "./Schedules/Repo.js"
import { WebhooksRepo } from "./Webhooks.js"

const scheduleNotFound = notFound("schedule", "schedule_id")

/** What one pass of the scheduler did: started a run, disabled a schedule, or found nothing due. */
export type Firing =
  | { readonly _tag: "Fired"; readonly cell: CellRef; readonly scheduleId: string; readonly runId: string; readonly scheduledAt: Date }
  | { readonly _tag: "Disabled"; readonly scheduleId: string }
  | { readonly _tag: "Advanced"; readonly scheduleId: string }

/** A scheduled time's run had no room in a quota: its savepoint rolls back. */
class OverQuota extends Data.TaggedError("OverQuota")<{ readonly quota: QuotaName }> {}

export class Schedules extends Effect.Service<Schedules>()("Schedules", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* SchedulesRepo
    const agents = yield* Agents
    const platform = yield* Platform
    const runs = yield* RunStore
    const webhooks = yield* WebhooksRepo
    const config = yield* AppConfig
    const files = yield* Files
    const quotas = yield* QuotasRepo
    const settings = yield* EnvironmentSettingsRepo
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /** The cron in its zone, or 400 naming the field at fault. */
    const parsed = (cron: string, timezone: string, at: Date) =>
      Either.match(Cron.parse(cron, timezone, at), {
        onLeft: (problem) => invalid(problem.param === "cron" ? "invalid_cron" : "invalid_timezone", problem.message, problem.param),
        onRight: Effect.succeed
      })

    /**
     * 400 `parameter_invalid` (param `cron`) when the expression's times can be closer than the
     * environment's `schedule_min_interval_seconds` (D20).
     */
    const oftenEnough = (cell: CellRef, cron: string) =>
      Effect.gen(function*() {
        const minimum = yield* settings.scheduleMinInterval(cell)
        const gap = Cron.shortestGapSeconds(cron)
        if (gap < minimum) {
          return yield* invalid(
            "parameter_invalid",
            `cron fires ${gap} s apart at its closest; this environment's schedule_min_interval_seconds is ${minimum} ` +
              "(the operator sets it)",
            "cron"
          )
        }
      })

    const found = (row: ScheduleRow | undefined) => (row ? Effect.succeed(row) : Effect.fail(scheduleNotFound))

    /** A new schedule, counted in the environment's `schedules` quota: 429 `quota_exceeded` past `limit`, nothing stored. */
    const create = (p: Principal, body: CreateSchedule, limit: number) =>
      Effect.gen(function*() {
        const workspace = yield* agents.getWorkspace(p, body.workspace_id)
        const revisionWorkspace = yield* agents.revisionWorkspace(p, body.agent_revision_id)
        if (revisionWorkspace === undefined) return yield* notFound("agent revision", "agent_revision_id")
        if (revisionWorkspace !== workspace.id) {
          return yield* invalid(
            "revision_not_in_workspace",
            "The agent revision belongs to an agent of another workspace",
            "agent_revision_id"
          )
        }
        const at = yield* now
        const timezone = body.timezone ?? "UTC"
        const schedule = yield* parsed(body.cron, timezone, at)
        yield* oftenEnough(p, body.cron)
        // the run input's rules, as run creation checks them (text sizes, files of this environment)
        yield* admittedInput(files, p, body.input)
        const enabled = body.enabled ?? true
        const row = yield* repo.insert({
          id: yield* makeId("sched"),
          tenant_id: p.tenantId,
          environment: p.environment,
          workspace_id: workspace.id,
          agent_revision_id: body.agent_revision_id,
          cron: body.cron,
          timezone,
          input: body.input,
          enabled,
          status: enabled ? "active" : "paused",
          next_run_at: enabled ? Cron.nextAfter(schedule, at) ?? null : null,
          created_by_key_id: p.keyId,
          created_at: at
        }, limit)
        if (row === undefined) return yield* quotaExceeded("schedules", limit, at)
        return toSchedule(row)
      })

    /**
     * Changes cron, time zone, input or `enabled`. A new cron or zone, or resuming, computes
     * `next_run_at` from now (a pause is not caught up); a disabled schedule cannot be changed (409).
     */
    const update = (p: CellRef, id: string, body: UpdateSchedule) =>
      Effect.gen(function*() {
        if (Object.values(body).every((v) => v === undefined)) {
          return yield* invalid("parameter_missing", "Send at least one of cron, timezone, input, enabled")
        }
        const current = yield* found(yield* repo.lock(p, id))
        if (current.status === "disabled") {
          return yield* conflict(
            "schedule_disabled",
            `This schedule was disabled (${current.status_reason}) and cannot be changed; delete it, and create a new one with a valid key`
          )
        }
        const at = yield* now
        const cron = body.cron ?? current.cron
        const timezone = body.timezone ?? current.timezone
        const schedule = yield* parsed(cron, timezone, at)
        if (body.cron !== undefined) yield* oftenEnough(p, body.cron)
        if (body.input !== undefined) yield* admittedInput(files, p, body.input)
        const enabled = body.enabled ?? current.enabled
        const status: ScheduleStatus = enabled ? "active" : "paused"
        const recompute = body.cron !== undefined || body.timezone !== undefined || enabled !== current.enabled
        const row = yield* repo.update(id, {
          cron: body.cron,
          timezone: body.timezone,
          input: body.input,
          enabled,
          status,
          nextRunAt: !enabled ? null : recompute ? Cron.nextAfter(schedule, at) ?? null : undefined
        }, at)
        return toSchedule(row)
      })

    const remove = (p: CellRef, id: string) =>
      Effect.gen(function*() {
        if (!(yield* repo.remove(p, id))) return yield* Effect.fail(scheduleNotFound)
        return { id, object: "schedule" as const, deleted: true as const }
      })

    const listRuns = (p: Principal, id: string, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        yield* found(yield* repo.schedule(p, id))
        const list = `schedule-runs:${id}`
        const after = yield* Cursor.decode(params.cursor, list, cellKey(p))
        const limit = params.limit ?? Cursor.DEFAULT_LIMIT
        return Cursor.page(yield* repo.runs(id, after, limit), limit, list, cellKey(p), toScheduledRun)
      })

    // ---- firing ----------------------------------------------------------------------------------
    /** Disables a schedule whose key may no longer act, announcing it (`schedule.disabled`) in the same transaction. */
    const disable = (row: ScheduleRow, at: Date) =>
      Effect.gen(function*() {
        const disabled = yield* repo.update(row.id, {
          status: "disabled",
          statusReason: AUTHORIZATION_REVOKED,
          nextRunAt: null
        }, at)
        yield* webhooks.enqueue({
          cell: { tenantId: row.tenant_id, environment: row.environment },
          type: "schedule.disabled",
          eventId: yield* makeId("evt"),
          at,
          data: toSchedule(disabled)
        })
        yield* Effect.logInfo("schedule disabled: its key was revoked").pipe(Effect.annotateLogs({ schedule_id: row.id }))
        return { _tag: "Disabled", scheduleId: row.id } as const
      })

    /**
     * Starts the run of `scheduledAt` in a new conversation, as the schedule's key (in the caller's
     * transaction); undefined when the time already started one, or when the input no longer admits
     * (a file it names was deleted): then that time starts no run.
     */
    const start = (row: ScheduleRow, scheduledAt: Date, at: Date) =>
      Effect.gen(function*() {
        const cell = { tenantId: row.tenant_id, environment: row.environment }
        const item = yield* Effect.either(admittedInput(files, cell, row.input))
        if (Either.isLeft(item)) {
          yield* Effect.logWarning(`a scheduled time started no run: its input does not admit (${item.left.message})`)
          return undefined
        }
        const runId = yield* makeId("run")
        const limits = yield* quotas.limits(cell, config.quotas[cell.environment])
        // In a savepoint: a quota without room undoes the firing's claim and its run (that time starts none).
        const fired = yield* sql.withTransaction(Effect.gen(function*() {
          if (!(yield* repo.claimFiring({ scheduleId: row.id, scheduledAt, cell, runId, at }))) return undefined
          const conversation = yield* runs.insertConversation({
            id: yield* makeId("conv"),
            tenant_id: row.tenant_id,
            environment: row.environment,
            workspace_id: row.workspace_id,
            agent_revision_id: row.agent_revision_id,
            created_by_key_id: row.created_by_key_id
          })
          const admission = yield* runs.admit({
            id: runId,
            tenant_id: row.tenant_id,
            environment: row.environment,
            conversation_id: conversation.id,
            key_id: row.created_by_key_id,
            user_id: null,
            input: row.input,
            item: item.right,
            created_at: at,
            start_deadline_at: new Date(at.getTime() + config.runs.startDeadlineSeconds * 1000),
            authorization_expires_at: new Date(at.getTime() + config.runs.authorizationSeconds * 1000)
          }, limits)
          if (admission._tag === "OverQuota") return yield* new OverQuota({ quota: admission.quota })
          // A new conversation, just written, has no other run: admission cannot be refused.
          if (admission._tag === "ConversationBusy" || admission._tag === "ConversationNotFound") {
            return yield* Effect.dieMessage("a scheduled run was refused admission in its new conversation")
          }
          return { _tag: "Fired", cell, scheduleId: row.id, runId, scheduledAt } as const
        })).pipe(
          Effect.catchTag("OverQuota", ({ quota }) =>
            Effect.as(Effect.logWarning(`a scheduled time started no run: the environment's ${quota} quota has no room`), undefined))
        )
        return fired
      })

    /**
     * A schedule whose firing failed (a defect: the transaction rolled back) skips that time, so it
     * cannot hold up the schedules due after it. A database that cannot be reached skips nothing.
     */
    const skipFailed = (row: ScheduleRow, at: Date, defect: unknown) =>
      Effect.gen(function*() {
        if (isDatabaseUnavailable(defect)) return yield* Effect.die(defect)
        yield* Effect.logError("a schedule failed to fire: that scheduled time is skipped", defect)
        const compiled = Cron.compile(row.cron, row.timezone)
        yield* dieOnSqlError(repo.update(row.id, {
          nextRunAt: Either.isRight(compiled) ? Cron.nextAfter(compiled.right, at) ?? null : null
        }, at))
        return { _tag: "Advanced", scheduleId: row.id } as const
      }).pipe(Effect.annotateLogs({ schedule_id: row.id, tenant_id: row.tenant_id }))

    /**
     * One due schedule at `at` (the caller's Clock), of `cell` if given, in one transaction: its key
     * checked, then the run of its latest scheduled time at or before `at` started and `next_run_at`
     * moved to the first time after `at`. Undefined when nothing is due (or every due one is another
     * process's).
     */
    const fireNext = (at: Date, cell?: CellRef): Effect.Effect<Firing | undefined> => {
      let claimed: ScheduleRow | undefined
      return sql.withTransaction(Effect.gen(function*() {
        const row = yield* repo.claimDue(at, cell)
        if (row === undefined) return undefined
        claimed = row
        return yield* Effect.gen(function*() {
          if ((yield* platform.authorization({ key_id: row.created_by_key_id, user_id: null })) !== "active") {
            return yield* disable(row, at)
          }
          const compiled = Cron.compile(row.cron, row.timezone)
          if (Either.isLeft(compiled) || row.next_run_at === null) {
            yield* Effect.logError("a stored schedule no longer parses; it will not fire", { problem: compiled })
            yield* repo.update(row.id, { nextRunAt: null }, at)
            return { _tag: "Advanced", scheduleId: row.id } as const
          }
          const scheduledAt = Cron.latestAtOrBefore(compiled.right, row.next_run_at, at)
          const fired = yield* start(row, scheduledAt, at)
          yield* repo.update(row.id, {
            nextRunAt: Cron.nextAfter(compiled.right, at) ?? null,
            ...(fired ? { lastRunAt: scheduledAt, lastRunId: fired.runId } : {})
          }, at)
          return fired ?? { _tag: "Advanced", scheduleId: row.id } as const
        }).pipe(Effect.annotateLogs({ schedule_id: row.id, tenant_id: row.tenant_id }))
      })).pipe(
        dieOnSqlError,
        Effect.catchAllDefect((defect) => (claimed === undefined ? Effect.die(defect) : skipFailed(claimed, at, defect))),
        traced("Schedules.fireNext")
      )
    }

    return {
      create: (p: Gated<Principal>, body: CreateSchedule, limit: number) => dieOnSqlError(create(p, body, limit)),
      get: (p: CellRef, id: string) => dieOnSqlError(Effect.map(Effect.flatMap(repo.schedule(p, id), found), toSchedule)),
      list: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(Cursor.listPage("schedules", repo.schedules, toSchedule)(p, params)),
      update: (p: Gated<CellRef>, id: string, body: UpdateSchedule) => dieOnSqlError(update(p, id, body)),
      remove: (p: Gated<CellRef>, id: string) => dieOnSqlError(remove(p, id)),
      listRuns: (p: Principal, id: string, params: Cursor.ListParams) => dieOnSqlError(listRuns(p, id, params)),
      fireNext,
      /** The environments with a schedule due at `at`, the longest-waiting first (the scheduler's turns). */
      dueCells: (at: Date) => dieOnSqlError(repo.dueCells(at)),
      /** The earliest `next_run_at` of an active schedule, if any. */
      nextDue: dieOnSqlError(repo.nextDue)
    } as const
  }),
  dependencies: [
    SchedulesRepo.Default,
    Agents.Default,
    Platform.Default,
    WebhooksRepo.Default,
    Files.Default,
    QuotasRepo.Default,
    EnvironmentSettingsRepo.Default
  ]
}) {}
