/** SQL of environment settings (one row per environment, absent until first set: the defaults apply). */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { DEFAULT_AUDIT_RETENTION_DAYS, DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS, IdentityProvider } from "../Domain/EnvironmentSettings.js"
import type { CellRef } from "../Kernel/Principal.js"

export const SettingsRow = Schema.Struct({
  identity_provider: Schema.NullOr(IdentityProvider),
  default_model_profile_id: Schema.NullOr(Schema.String),
  audit_retention_days: Schema.Number,
  schedule_min_interval_seconds: Schema.Number,
  updated_at: Rows.Time
})
export type SettingsRow = typeof SettingsRow.Type

/** The fields a change sets (absent: unchanged). */
export interface SettingsChange {
  readonly identity_provider?: IdentityProvider | null | undefined
  readonly default_model_profile_id?: string | null | undefined
  readonly audit_retention_days?: number | undefined
  readonly schedule_min_interval_seconds?: number | undefined
}

const MinInterval = Schema.Struct({ schedule_min_interval_seconds: Schema.Number })

export class EnvironmentSettingsRepo extends Effect.Service<EnvironmentSettingsRepo>()("EnvironmentSettingsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(
      "identity_provider, default_model_profile_id, audit_retention_days, schedule_min_interval_seconds, updated_at"
    )
    const inCell = (cell: CellRef) => sql`tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`

    const settings = (cell: CellRef) => sql`SELECT ${columns} FROM environment_settings WHERE ${inCell(cell)}`.pipe(Rows.maybe(SettingsRow))

    /** The environment's `schedule_min_interval_seconds` (its default when never set). */
    const scheduleMinInterval = (cell: CellRef) =>
      sql`SELECT schedule_min_interval_seconds FROM environment_settings WHERE ${inCell(cell)}`.pipe(
        Rows.maybe(MinInterval),
        Effect.map((row) => row?.schedule_min_interval_seconds ?? DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS)
      )

    /**
     * Sets the given fields (the others keep their value, or their default in a new row), in one
     * statement. With `raiseOnly` (a key's change, D20), `audit_retention_days` may not go below the
     * value it has (its default when never set), checked on the row as it is locked: undefined, and
     * nothing changed, when it would.
     */
    const update = (cell: CellRef, change: SettingsChange, at: Date, options: { readonly raiseOnly: boolean }) => {
      const idp = change.identity_provider === undefined || change.identity_provider === null
        ? null
        : JSON.stringify(change.identity_provider)
      const set = (column: string, given: boolean) => given ? sql`, ${sql(column)} = EXCLUDED.${sql(column)}` : sql``
      const retention = change.audit_retention_days
      const guarded = options.raiseOnly && retention !== undefined
      return sql`
        INSERT INTO environment_settings (tenant_id, environment, identity_provider, default_model_profile_id, audit_retention_days,
                                          schedule_min_interval_seconds, updated_at)
        SELECT ${cell.tenantId}, ${cell.environment}, ${idp}::jsonb, ${change.default_model_profile_id ?? null},
               ${retention ?? DEFAULT_AUDIT_RETENTION_DAYS}::int,
               ${change.schedule_min_interval_seconds ?? DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS}::int, ${at}::timestamptz
        WHERE ${
        guarded
          ? sql`${retention}::int >= COALESCE((SELECT audit_retention_days FROM environment_settings WHERE ${inCell(cell)}),
                                              ${DEFAULT_AUDIT_RETENTION_DAYS})`
          : sql`TRUE`
      }
        ON CONFLICT (tenant_id, environment) DO UPDATE SET updated_at = EXCLUDED.updated_at
          ${set("identity_provider", change.identity_provider !== undefined)}
          ${set("default_model_profile_id", change.default_model_profile_id !== undefined)}
          ${set("audit_retention_days", retention !== undefined)}
          ${set("schedule_min_interval_seconds", change.schedule_min_interval_seconds !== undefined)}
        ${guarded ? sql`WHERE environment_settings.audit_retention_days <= EXCLUDED.audit_retention_days` : sql``}
        RETURNING ${columns}`.pipe(Rows.maybe(SettingsRow))
    }

    /** Whether the cell is an environment of an active tenant, not deleted nor being deleted. */
    const live = (cell: CellRef) =>
      sql`SELECT 1 FROM environments e JOIN tenants t ON t.id = e.tenant_id
          WHERE e.tenant_id = ${cell.tenantId} AND e.name = ${cell.environment} AND t.status = 'active'
            AND e.state NOT IN ('deleting', 'deleted')`.pipe(Effect.map((rows) => rows.length > 0))

    return { settings, scheduleMinInterval, update, live } as const
  })
}) {}
