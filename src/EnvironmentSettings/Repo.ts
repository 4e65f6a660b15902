/** SQL of environment settings (one row per environment, absent until first set). */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { IdentityProvider } from "../Domain/EnvironmentSettings.js"
import type { CellRef } from "../Kernel/Principal.js"

export const SettingsRow = Schema.Struct({
  identity_provider: Schema.NullOr(IdentityProvider),
  updated_at: Rows.Time
})
export type SettingsRow = typeof SettingsRow.Type

export class EnvironmentSettingsRepo extends Effect.Service<EnvironmentSettingsRepo>()("EnvironmentSettingsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const settings = (cell: CellRef) =>
      sql`SELECT identity_provider, updated_at FROM environment_settings
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`.pipe(Rows.maybe(SettingsRow))

    const setIdentityProvider = (cell: CellRef, provider: IdentityProvider | null, at: Date) =>
      sql`INSERT INTO environment_settings (tenant_id, environment, identity_provider, updated_at)
          VALUES (${cell.tenantId}, ${cell.environment}, ${provider === null ? null : JSON.stringify(provider)}::jsonb, ${at})
          ON CONFLICT (tenant_id, environment) DO UPDATE SET identity_provider = EXCLUDED.identity_provider,
                                                             updated_at = EXCLUDED.updated_at`.pipe(Rows.none)

    return { settings, setIdentityProvider } as const
  })
}) {}
