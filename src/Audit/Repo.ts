/**
 * SQL of the audit log (D16): append one entry (one statement, in the caller's transaction when
 * there is one), list a cell's entries newest first, and sweep those past their environment's
 * retention. The table refuses UPDATE and DELETE (migration 0012) except in the sweep's own
 * transaction, which sets `agent_platform.audit_sweep`.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Direct from "../Database/Direct.js"
import * as Rows from "../Database/Rows.js"
import { AuditActorType } from "../Domain/Audit.js"
import { DEFAULT_AUDIT_RETENTION_DAYS } from "../Domain/EnvironmentSettings.js"
import type { CellRef } from "../Kernel/Principal.js"

export const AuditRow = Schema.Struct({
  id: Schema.String,
  occurred_at: Rows.Time,
  actor_type: AuditActorType,
  actor_id: Schema.String,
  key_id: Schema.NullOr(Schema.String),
  action: Schema.String,
  resource_type: Schema.String,
  resource_id: Schema.String,
  request_id: Schema.String,
  status: Schema.Number,
  ip: Schema.NullOr(Schema.String)
})
export type AuditRow = typeof AuditRow.Type

/** An entry as written: a row of a cell. */
export interface NewAuditRow extends Omit<AuditRow, "occurred_at"> {
  readonly cell: CellRef
  readonly occurred_at: Date
}

export interface AuditFilter {
  readonly from?: Date | undefined
  readonly to?: Date | undefined
  readonly action?: string | undefined
  readonly resource_id?: string | undefined
  readonly actor_id?: string | undefined
}

export class AuditRepo extends Effect.Service<AuditRepo>()("AuditRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Appends the entry to its environment: one INSERT, which writes nothing for an environment that
     * does not exist or was purged (an operator's request about one, say). `along`: statements
     * (INSERT, UPDATE or DELETE) written in the same statement, as CTEs (which always run); `reads`:
     * queries it answers too (their rows as JSON, in order; none when it wrote no entry).
     */
    const insert = (e: NewAuditRow, along: ReadonlyArray<Statement.Fragment> = [], reads: ReadonlyArray<Statement.Fragment> = []) =>
      Direct.execute(sql<Record<string, unknown>>`${Rows.withWrites(sql, along)}
          INSERT INTO audit_entries (tenant_id, environment, id, occurred_at, actor_type, actor_id, key_id, action,
                                     resource_type, resource_id, request_id, status, ip)
          SELECT tenant_id, name, ${e.id}, ${e.occurred_at}, ${e.actor_type}, ${e.actor_id}, ${e.key_id}, ${e.action},
                 ${e.resource_type}, ${e.resource_id}, ${e.request_id}, ${e.status}, ${e.ip}
          FROM environments WHERE tenant_id = ${e.cell.tenantId} AND name = ${e.cell.environment} AND state <> 'deleted'
          ${reads.length === 0 ? sql`` : sql`RETURNING ${Rows.readColumns(sql, reads)}`}`)
        .pipe(Effect.map((rows) => Rows.readValues(rows[0], reads.length)))

    /** A page of the cell's entries, newest first (`limit + 1` rows: the caller pages). */
    const list = (tenantId: string, environment: string, after: string | undefined, limit: number, filter: AuditFilter) =>
      sql`SELECT id, occurred_at, actor_type, actor_id, key_id, action, resource_type, resource_id, request_id, status, ip
          FROM audit_entries
          WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ${filter.from === undefined ? sql`` : sql`AND occurred_at >= ${filter.from}`}
          ${filter.to === undefined ? sql`` : sql`AND occurred_at < ${filter.to}`}
          ${filter.action === undefined ? sql`` : sql`AND action = ${filter.action}`}
          ${filter.resource_id === undefined ? sql`` : sql`AND resource_id = ${filter.resource_id}`}
          ${filter.actor_id === undefined ? sql`` : sql`AND actor_id = ${filter.actor_id}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(AuditRow))

    /**
     * Deletes every entry older than its environment's retention (`audit_retention_days`, 90 when
     * unset) at `at`: how many. Run it in a transaction of its own (the flag is set for it only).
     */
    const sweepExpired = (at: Date) =>
      Effect.zipRight(
        sql`SELECT set_config('agent_platform.audit_sweep', 'on', true)`,
        sql`WITH swept AS (
              DELETE FROM audit_entries a
              USING environments e LEFT JOIN environment_settings s ON s.tenant_id = e.tenant_id AND s.environment = e.name
              WHERE a.tenant_id = e.tenant_id AND a.environment = e.name
                AND a.occurred_at < ${at}::timestamptz
                                    - make_interval(days => COALESCE(s.audit_retention_days, ${DEFAULT_AUDIT_RETENTION_DAYS}))
              RETURNING 1)
            SELECT count(*) AS n FROM swept`.pipe(Rows.single(Schema.Struct({ n: Rows.Int8 })), Effect.map((r) => r.n))
      )

    return { insert, list, sweepExpired } as const
  })
}) {}
