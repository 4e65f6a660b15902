/**
 * SQL of schedules and their firings (D15, migration 0015). Rows decoded; no service logic. A
 * change that moves a schedule's `next_run_at` notifies channel `schedules` (delivered at commit),
 * so every process's scheduler wakes and sleeps again until the new earliest due time.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { CreateRun } from "../Domain/Runs.js"
import { type Schedule, type ScheduledRun, ScheduleStatus } from "../Domain/Schedules.js"
import { EnvironmentName, toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import { countLevel, releaseLevel } from "../Quotas/Queries.js"
import { RunRow, toRun } from "../Runs.js"

export const ScheduleRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  workspace_id: Schema.String,
  agent_revision_id: Schema.String,
  cron: Schema.String,
  timezone: Schema.String,
  input: Schema.typeSchema(CreateRun.fields.input),
  enabled: Schema.Boolean,
  status: ScheduleStatus,
  status_reason: Schema.NullOr(Schema.String),
  next_run_at: Rows.TimeOrNull,
  last_run_at: Rows.TimeOrNull,
  last_run_id: Schema.NullOr(Schema.String),
  created_by_key_id: Schema.String,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type ScheduleRow = typeof ScheduleRow.Type

const ScheduledRunRow = Schema.Struct({ ...RunRow.fields, scheduled_at: Rows.Time })

const CellRow = Schema.Struct({ tenant_id: Schema.String, environment: EnvironmentName })

/** What a change of a schedule sets (undefined: unchanged). */
export interface SchedulePatch {
  readonly cron?: string | undefined
  readonly timezone?: string | undefined
  readonly input?: ReadonlyArray<unknown> | undefined
  readonly enabled?: boolean | undefined
  readonly status?: ScheduleStatus | undefined
  readonly statusReason?: string | null | undefined
  readonly nextRunAt?: Date | null | undefined
  readonly lastRunAt?: Date | undefined
  readonly lastRunId?: string | undefined
}

export class SchedulesRepo extends Effect.Service<SchedulesRepo>()("SchedulesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const inCell = (cell: CellRef) => sql`tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`
    const notify = Rows.none(sql`SELECT pg_notify('schedules', 'changed')`)

    /**
     * The new schedule, counted in its cell's `schedules` quota in the same statement: undefined, and
     * nothing written, when the cell already has `limit` of them.
     */
    const insert = (s: Omit<ScheduleRow, "status_reason" | "last_run_at" | "last_run_id" | "updated_at">, limit: number) =>
      Effect.zipLeft(
        sql`WITH counted AS (${
          countLevel(sql, { tenantId: s.tenant_id, environment: s.environment }, "schedules", limit, sql`(SELECT 1) AS one`)
        })
            INSERT INTO schedules (id, tenant_id, environment, workspace_id, agent_revision_id, cron, timezone, input, enabled,
                                   status, next_run_at, created_by_key_id, created_at, updated_at)
            SELECT ${s.id}, ${s.tenant_id}, ${s.environment}, ${s.workspace_id}, ${s.agent_revision_id}, ${s.cron},
                   ${s.timezone}, ${JSON.stringify(s.input)}::jsonb, ${s.enabled}::boolean, ${s.status}, ${s.next_run_at}::timestamptz,
                   ${s.created_by_key_id}, ${s.created_at}::timestamptz, ${s.created_at}::timestamptz
            WHERE EXISTS (SELECT 1 FROM counted)
            RETURNING *`.pipe(Rows.maybe(ScheduleRow)),
        notify
      )

    const schedule = (cell: CellRef, id: string) =>
      sql`SELECT * FROM schedules WHERE id = ${id} AND ${inCell(cell)}`.pipe(Rows.maybe(ScheduleRow))

    /** The schedule, locked for a change in the caller's transaction. */
    const lock = (cell: CellRef, id: string) =>
      sql`SELECT * FROM schedules WHERE id = ${id} AND ${inCell(cell)} FOR UPDATE`.pipe(Rows.maybe(ScheduleRow))

    const schedules = (tenantId: string, environment: string, after: string | undefined, limit: number) =>
      sql`SELECT * FROM schedules WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ScheduleRow))

    /** Sets the given fields of a schedule (locked by the caller, or just claimed). */
    const update = (id: string, patch: SchedulePatch, at: Date) =>
      Effect.zipLeft(
        sql`UPDATE schedules SET
              cron = ${patch.cron ?? sql`cron`},
              timezone = ${patch.timezone ?? sql`timezone`},
              input = ${patch.input === undefined ? sql`input` : sql`${JSON.stringify(patch.input)}::jsonb`},
              enabled = ${patch.enabled ?? sql`enabled`},
              status = ${patch.status ?? sql`status`},
              status_reason = ${patch.statusReason === undefined ? sql`status_reason` : patch.statusReason},
              next_run_at = ${patch.nextRunAt === undefined ? sql`next_run_at` : patch.nextRunAt},
              last_run_at = ${patch.lastRunAt ?? sql`last_run_at`},
              last_run_id = ${patch.lastRunId ?? sql`last_run_id`},
              updated_at = ${at}
            WHERE id = ${id}
            RETURNING *`.pipe(Rows.single(ScheduleRow)),
        patch.nextRunAt === undefined ? Effect.void : notify
      )

    /**
     * Deletes the schedule and its firings (the runs it started stay), giving its place in the
     * `schedules` quota back; false when it is not the cell's.
     */
    const remove = (cell: CellRef, id: string) =>
      sql`WITH deleted AS (DELETE FROM schedules WHERE id = ${id} AND ${inCell(cell)} RETURNING id),
               released AS (${releaseLevel(sql, cell, "schedules", sql`deleted`)})
          SELECT id FROM deleted`.pipe(
        Rows.all(Schema.Struct({ id: Schema.String })),
        Effect.map((rows) => rows.length > 0)
      )

    /** The runs the schedule started, newest first (keyset on the run id). */
    const runs = (scheduleId: string, after: string | undefined, limit: number) =>
      sql`SELECT r.*, f.scheduled_at,
                 (SELECT e.id FROM run_events e WHERE e.run_id = r.id AND e.sequence = r.last_sequence) AS last_event_id
          FROM schedule_firings f JOIN runs r ON r.id = f.run_id
          WHERE f.schedule_id = ${scheduleId} ${after === undefined ? sql`` : sql`AND f.run_id < ${after}`}
          ORDER BY f.run_id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ScheduledRunRow))

    // ---- the scheduler ---------------------------------------------------------------------------
    /**
     * The cells with an active schedule due at `at`, the one whose earliest due time is oldest first
     * (the scheduler's round: one firing of each, in this order). One scan of the due schedules.
     */
    const dueCells = (at: Date) =>
      sql`SELECT tenant_id, environment FROM schedules WHERE status = 'active' AND next_run_at <= ${at}
          GROUP BY tenant_id, environment ORDER BY min(next_run_at), tenant_id, environment`.pipe(
        Rows.all(CellRow),
        Effect.map((rows): ReadonlyArray<CellRef> => rows.map((r) => ({ tenantId: r.tenant_id, environment: r.environment })))
      )

    /**
     * One active schedule due at `at` (the caller's Clock, never the database's), of `cell` if given,
     * earliest first, locked in the caller's transaction; `SKIP LOCKED`, so processes share the due
     * schedules and never fire one twice. A row another process advanced meanwhile is re-checked
     * against `at` as it is locked.
     */
    const claimDue = (at: Date, cell?: CellRef) =>
      sql`SELECT * FROM schedules WHERE status = 'active' AND next_run_at <= ${at} ${cell === undefined ? sql`` : sql`AND ${inCell(cell)}`}
          ORDER BY next_run_at LIMIT 1 FOR UPDATE SKIP LOCKED`.pipe(Rows.maybe(ScheduleRow))

    /**
     * Claims the scheduled time for a run (the run's idempotency identity): false when the time
     * already started one. The run it names is admitted later in the same transaction.
     */
    const claimFiring = (f: { scheduleId: string; scheduledAt: Date; cell: CellRef; runId: string; at: Date }) =>
      sql`INSERT INTO schedule_firings (schedule_id, scheduled_at, tenant_id, environment, run_id, created_at)
          VALUES (${f.scheduleId}, ${f.scheduledAt}, ${f.cell.tenantId}, ${f.cell.environment}, ${f.runId}, ${f.at})
          ON CONFLICT (schedule_id, scheduled_at) DO NOTHING
          RETURNING run_id`.pipe(
        Rows.all(Schema.Struct({ run_id: Schema.String })),
        Effect.map((rows) => rows.length > 0)
      )

    /** The earliest due time of an active schedule (the scheduler sleeps until then). */
    const nextDue = sql`SELECT min(next_run_at) AS due FROM schedules WHERE status = 'active'`.pipe(
      Rows.single(Schema.Struct({ due: Rows.TimeOrNull })),
      Effect.map((r) => r.due ?? undefined)
    )

    return { insert, schedule, lock, schedules, update, remove, runs, dueCells, claimDue, claimFiring, nextDue } as const
  })
}) {}

// ---- the resources rows become -------------------------------------------------------------------

const isoOrNull = (d: Date | null) => (d === null ? null : toIso(d))

export const toSchedule = (r: ScheduleRow): Schedule => ({
  id: r.id,
  object: "schedule",
  workspace_id: r.workspace_id,
  agent_revision_id: r.agent_revision_id,
  cron: r.cron,
  timezone: r.timezone,
  input: r.input,
  enabled: r.enabled,
  status: r.status,
  status_reason: r.status_reason,
  next_run_at: isoOrNull(r.next_run_at),
  last_run_at: isoOrNull(r.last_run_at),
  last_run_id: r.last_run_id,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})

export const toScheduledRun = (r: typeof ScheduledRunRow.Type): ScheduledRun => ({
  ...toRun(r),
  scheduled_at: toIso(r.scheduled_at)
})
