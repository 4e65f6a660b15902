/**
 * The quota counters' SQL fragments other capabilities compose into their own statements (D16,
 * migration 0019): the counters are changed only inside the statements of what they count (the run
 * admission and commit: Runs; a file's insert and delete: Files; memory: Memory; schedules and
 * webhook endpoints: Schedules, Webhooks), so a quota check never costs a round trip of its own.
 * `usedNow` reads them. The Quotas front door's other half is the service (src/Quotas.ts).
 */
import { type SqlClient } from "@effect/sql"
import type { Statement } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { type LevelQuota, type QuotaLimits, type QuotaUsed, utcDay } from "../Domain/Quotas.js"
import type { CellRef } from "../Kernel/Principal.js"

type Sql = SqlClient.SqlClient
type Fragment = Statement.Fragment

export const int8 = (n: number) => Math.trunc(n)

/**
 * `INSERT ... RETURNING 1` counting one run admitted at `at` for each row of `source` (a CTE of the
 * admission: the run it inserted), only while today's runs, the unfinished runs and today's tokens
 * all leave room: it returns no row when a limit is reached (the caller then refuses and rolls the
 * admission back). The counters row's lock orders concurrent admissions of the cell.
 */
export const countAdmission = (sql: Sql, cell: CellRef, limits: QuotaLimits, at: Date, source: Fragment): Fragment =>
  sql`INSERT INTO quota_usage AS u (tenant_id, environment, day, runs_today, active_runs)
      SELECT ${cell.tenantId}, ${cell.environment}, ${utcDay(at)}::date, 1, 1 FROM ${source}
      WHERE ${int8(limits.runs_per_day)}::bigint >= 1 AND ${int8(limits.concurrent_runs)}::bigint >= 1
        AND ${int8(limits.tokens_per_day)}::bigint >= 1
      ON CONFLICT (tenant_id, environment) DO UPDATE SET
        runs_today = CASE WHEN u.day >= EXCLUDED.day THEN u.runs_today + 1 ELSE 1 END,
        tokens_today = CASE WHEN u.day >= EXCLUDED.day THEN u.tokens_today ELSE 0 END,
        day = GREATEST(u.day, EXCLUDED.day),
        active_runs = u.active_runs + 1
      WHERE (CASE WHEN u.day >= EXCLUDED.day THEN u.runs_today ELSE 0 END) < ${int8(limits.runs_per_day)}::bigint
        AND u.active_runs < ${int8(limits.concurrent_runs)}::bigint
        AND (CASE WHEN u.day >= EXCLUDED.day THEN u.tokens_today ELSE 0 END) < ${int8(limits.tokens_per_day)}::bigint
      RETURNING 1`

/**
 * A run commit's change to the counters: a run that ended frees its place among the unfinished
 * ones, a model call's tokens count for the day of `at`.
 */
export const countRunCommit = (
  sql: Sql,
  cell: CellRef,
  change: { readonly ended: boolean; readonly tokens: number },
  at: Date,
  /** a further condition (the commit's guard) */
  only: Fragment = sql`TRUE`
) =>
  sql`UPDATE quota_usage SET
        active_runs = GREATEST(active_runs - ${change.ended ? 1 : 0}, 0),
        tokens_today = CASE WHEN day >= ${utcDay(at)}::date THEN tokens_today + ${int8(change.tokens)} ELSE ${int8(change.tokens)} END,
        runs_today = CASE WHEN day >= ${utcDay(at)}::date THEN runs_today ELSE 0 END,
        day = GREATEST(day, ${utcDay(at)}::date)
      WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND ${only}`

/**
 * `INSERT ... RETURNING 1` adding `bytes` to the cell's stored bytes; with a limit, only while they
 * fit within it (no row returned otherwise).
 */
export const countStorage = (sql: Sql, cell: CellRef, bytes: number, limit: number | undefined): Fragment =>
  sql`INSERT INTO quota_usage AS u (tenant_id, environment, storage_bytes)
      SELECT ${cell.tenantId}, ${cell.environment}, ${int8(bytes)}::bigint
      WHERE ${limit === undefined ? sql`TRUE` : sql`${int8(bytes)}::bigint <= ${int8(limit)}::bigint`}
      ON CONFLICT (tenant_id, environment) DO UPDATE SET storage_bytes = u.storage_bytes + EXCLUDED.storage_bytes
      WHERE ${limit === undefined ? sql`TRUE` : sql`u.storage_bytes + EXCLUDED.storage_bytes <= ${int8(limit)}::bigint`}
      RETURNING 1`

/** Gives back the bytes of deleted files (`source`: a CTE of the DELETE returning `bytes`). */
export const releaseStorage = (sql: Sql, cell: CellRef, source: Fragment): Fragment =>
  sql`UPDATE quota_usage SET storage_bytes = GREATEST(storage_bytes - (SELECT COALESCE(sum(bytes), 0) FROM ${source}), 0)
      WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND EXISTS (SELECT 1 FROM ${source})`

/**
 * `INSERT ... RETURNING 1` counting one more of a level quota (D20: a webhook endpoint, a schedule)
 * for each row of `source` (a CTE of the statement that creates it), only while it stays within
 * `limit`: no row is returned otherwise (the caller then refuses and rolls back). The counters
 * row's lock orders concurrent creations of the cell, so the count is exact.
 */
export const countLevel = (sql: Sql, cell: CellRef, name: LevelQuota, limit: number, source: Fragment): Fragment =>
  sql`INSERT INTO quota_usage AS u (tenant_id, environment, ${sql(name)})
      SELECT ${cell.tenantId}, ${cell.environment}, count(*) FROM ${source} HAVING count(*) <= ${int8(limit)}::bigint
      ON CONFLICT (tenant_id, environment) DO UPDATE SET ${sql(name)} = u.${sql(name)} + EXCLUDED.${sql(name)}
      WHERE u.${sql(name)} + EXCLUDED.${sql(name)} <= ${int8(limit)}::bigint
      RETURNING 1`

/** Counts one fewer of a level quota for each row of `source` (a CTE of the DELETE). */
export const releaseLevel = (sql: Sql, cell: CellRef, name: LevelQuota, source: Fragment): Fragment =>
  sql`UPDATE quota_usage SET ${sql(name)} = GREATEST(${sql(name)} - (SELECT count(*) FROM ${source}), 0)
      WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND EXISTS (SELECT 1 FROM ${source})`

const UsedRow = Schema.Struct({
  runs_per_day: Rows.Int8,
  concurrent_runs: Rows.Int8,
  tokens_per_day: Rows.Int8,
  storage_bytes: Rows.Int8,
  webhook_endpoints: Rows.Int8,
  schedules: Rows.Int8
})

const EMPTY: QuotaUsed = {
  runs_per_day: 0,
  concurrent_runs: 0,
  tokens_per_day: 0,
  storage_bytes: 0,
  webhook_endpoints: 0,
  schedules: 0
}

/** What the cell's counters hold at `at` (a counter of an earlier day reads 0). */
export const usedNow = (sql: Sql, cell: CellRef, at: Date) =>
  sql`SELECT CASE WHEN day >= ${utcDay(at)}::date THEN runs_today ELSE 0 END AS runs_per_day,
             active_runs AS concurrent_runs,
             CASE WHEN day >= ${utcDay(at)}::date THEN tokens_today ELSE 0 END AS tokens_per_day,
             storage_bytes, webhook_endpoints, schedules
      FROM quota_usage WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`.pipe(
    Rows.maybe(UsedRow),
    Effect.map((row): QuotaUsed => row ?? EMPTY)
  )
