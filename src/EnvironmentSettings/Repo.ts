/** SQL of environment settings (one row per environment, absent until first set: the defaults apply). */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { DEFAULT_AUDIT_RETENTION_DAYS, IdentityProvider } from "../Domain/EnvironmentSettings.js"
import type { CellRef } from "../Kernel/Principal.js"

export const SettingsRow = Schema.Struct({
  identity_provider: Schema.NullOr(IdentityProvider),
  default_model_profile_id: Schema.NullOr(Schema.String),
  audit_retention_days: Schema.Number,
  updated_at: Rows.Time
})
export type SettingsRow = typeof SettingsRow.Type

/** The fields a change sets (absent: unchanged). */
export interface SettingsChange {
  readonly identity_provider?: IdentityProvider | null | undefined
  readonly default_model_profile_id?: string | null | undefined
  readonly audit_retention_days?: number | undefined
}

export class EnvironmentSettingsRepo extends Effect.Service<EnvironmentSettingsRepo>()("EnvironmentSettingsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const settings = (cell: CellRef) =>
      sql`SELECT identity_provider, default_model_profile_id, audit_retention_days, updated_at FROM environment_settings
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`.pipe(Rows.maybe(SettingsRow))

    /** Sets the given fields (the others keep their value, or their default in a new row), in one statement. */
    const update = (cell: CellRef, change: SettingsChange, at: Date) => {
      const idp = change.identity_provider === undefined || change.identity_provider === null
        ? null
        : JSON.stringify(change.identity_provider)
      const set = (column: string, given: boolean) => given ? sql`, ${sql(column)} = EXCLUDED.${sql(column)}` : sql``
      return sql`
        INSERT INTO environment_settings (tenant_id, environment, identity_provider, default_model_profile_id, audit_retention_days, updated_at)
        VALUES (${cell.tenantId}, ${cell.environment}, ${idp}::jsonb, ${change.default_model_profile_id ?? null},
                ${change.audit_retention_days ?? DEFAULT_AUDIT_RETENTION_DAYS}, ${at})
        ON CONFLICT (tenant_id, environment) DO UPDATE SET updated_at = EXCLUDED.updated_at
          ${set("identity_provider", change.identity_provider !== undefined)}
          ${set("default_model_profile_id", change.default_model_profile_id !== undefined)}
          ${set("audit_retention_days", change.audit_retention_days !== undefined)}
        RETURNING identity_provider, default_model_profile_id, audit_retention_days, updated_at`.pipe(Rows.single(SettingsRow))
    }

    return { settings, update } as const
  })
}) {}
