/**
 * Environment settings (D9, D16, D20): the tenant's identity provider (whose assertions make actor
 * sessions), the default model profile (a revision created without `model_profile_id` uses it; it
 * must be a profile of the environment), how many days audit entries are kept, and the shortest
 * interval a schedule may fire at. A JWKS URL is a customer destination: refused at once unless
 * public HTTPS (D10), and fetched through the guarded dispatcher.
 *
 * A key may raise the audit retention, never lower it (403 `retention_lowering_forbidden`): the
 * log of what a key did must not be erasable by a key. The operator sets the retention (7..3650)
 * and `schedule_min_interval_seconds` (1..3600) on the operator plane.
 */
import { Clock, Effect } from "effect"
import { createLocalJWKSet, type JSONWebKeySet } from "jose"

import { Agents } from "./Agents.js"
import { dieOnSqlError } from "./Database/Defects.js"
import {
  DEFAULT_AUDIT_RETENTION_DAYS,
  DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS,
  type IdentityProvider,
  type OperatorUpdateSettings,
  type Settings,
  type UpdateSettings
} from "./Domain/EnvironmentSettings.js"
import { EnvironmentSettingsRepo, type SettingsRow } from "./EnvironmentSettings/Repo.js"
import { forbidden, invalid, notFound } from "./Kernel/Errors.js"
import { toIso } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { Destinations } from "./Outbound/Destinations.js"

const toSettings = (row: SettingsRow | undefined): Settings => ({
  object: "settings" as const,
  identity_provider: row?.identity_provider ?? null,
  default_model_profile_id: row?.default_model_profile_id ?? null,
  audit_retention_days: row?.audit_retention_days ?? DEFAULT_AUDIT_RETENTION_DAYS,
  schedule_min_interval_seconds: row?.schedule_min_interval_seconds ?? DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS,
  updated_at: row === undefined ? null : toIso(row.updated_at)
})

export class EnvironmentSettings extends Effect.Service<EnvironmentSettings>()("EnvironmentSettings", {
  effect: Effect.gen(function*() {
    const repo = yield* EnvironmentSettingsRepo
    const destinations = yield* Destinations
    const agents = yield* Agents

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const get = (cell: CellRef) => Effect.map(repo.settings(cell), toSettings)

    const checkProvider = (idp: IdentityProvider) =>
      Effect.gen(function*() {
        if ((idp.jwks === undefined) === (idp.jwks_url === undefined)) {
          return yield* invalid("parameter_invalid", "identity_provider: give exactly one of jwks and jwks_url", "identity_provider")
        }
        if (idp.jwks_url !== undefined) yield* destinations.checkRegistration(idp.jwks_url, "identity_provider.jwks_url")
        if (idp.jwks !== undefined) {
          const ok = yield* Effect.sync(() => {
            try {
              createLocalJWKSet(idp.jwks as JSONWebKeySet)
              return idp.jwks!.keys.length > 0
            } catch {
              return false
            }
          })
          if (!ok) {
            return yield* invalid("parameter_invalid", "identity_provider.jwks: not a usable JSON Web Key Set", "identity_provider.jwks")
          }
        }
      })

    /** Sets what the body gives (null removes the identity provider or the default profile), in one statement. */
    const update = (p: Principal, body: UpdateSettings) =>
      Effect.gen(function*() {
        if (body.identity_provider) yield* checkProvider(body.identity_provider)
        if (body.default_model_profile_id) {
          yield* agents.getModelProfile(p, body.default_model_profile_id).pipe(
            Effect.catchTag("NotFound", () =>
              Effect.fail(invalid(
                "parameter_invalid",
                `default_model_profile_id: no model profile ${body.default_model_profile_id} in this environment`,
                "default_model_profile_id"
              )))
          )
        }
        if (Object.keys(body).length === 0) return yield* get(p)
        const row = yield* repo.update(p, body, yield* now, { raiseOnly: true })
        if (row === undefined) {
          const current = (yield* get(p)).audit_retention_days
          return yield* forbidden(
            "retention_lowering_forbidden",
            `A key may raise audit_retention_days, never lower it: it is ${current} days here; the operator can lower it`
          )
        }
        return toSettings(row)
      })

    /** The operator's view of a live environment's settings (404 for any other). */
    const live = (tenantId: string, environment: CellRef["environment"]) =>
      Effect.gen(function*() {
        const cell = { tenantId, environment }
        if (!(yield* repo.live(cell))) return yield* notFound("environment", "environment")
        return cell
      })

    const operatorGet = (tenantId: string, environment: CellRef["environment"]) => Effect.flatMap(live(tenantId, environment), get)

    /** The operator's change: any value in range, lower or higher (the pipeline audits it). */
    const operatorUpdate = (tenantId: string, environment: CellRef["environment"], body: OperatorUpdateSettings) =>
      Effect.gen(function*() {
        const cell = yield* live(tenantId, environment)
        if (Object.keys(body).length === 0) return yield* get(cell)
        const row = yield* repo.update(cell, body, yield* now, { raiseOnly: false })
        return row === undefined ? yield* Effect.dieMessage("an operator's settings change wrote no row") : toSettings(row)
      })

    /** The environment's identity provider, if one is set. */
    const identityProvider = (cell: CellRef) => Effect.map(repo.settings(cell), (row) => row?.identity_provider ?? undefined)

    return {
      get: (cell: CellRef) => dieOnSqlError(get(cell)),
      update: (p: Gated<Principal>, body: UpdateSettings) => dieOnSqlError(update(p, body)),
      identityProvider: (cell: CellRef) => dieOnSqlError(identityProvider(cell)),
      operatorGet: (tenantId: string, environment: CellRef["environment"]) => dieOnSqlError(operatorGet(tenantId, environment)),
      operatorUpdate: (tenantId: string, environment: CellRef["environment"], body: OperatorUpdateSettings) =>
        dieOnSqlError(operatorUpdate(tenantId, environment, body))
    } as const
  }),
  dependencies: [EnvironmentSettingsRepo.Default, Destinations.Default, Agents.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of EnvironmentSettings (scripts/layers.ts) ----
export { EnvironmentSettingsRepo } from "./EnvironmentSettings/Repo.js"
