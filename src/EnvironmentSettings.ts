/**
 * Environment settings (D9, D16): the tenant's identity provider (whose assertions make actor
 * sessions), the default model profile (a revision created without `model_profile_id` uses it; it
 * must be a profile of the environment) and how many days audit entries are kept. A JWKS URL is a
 * customer destination: refused at once unless public HTTPS (D10), and fetched through the guarded
 * dispatcher.
 */
import { Clock, Effect } from "effect"
import { createLocalJWKSet, type JSONWebKeySet } from "jose"

import { Agents } from "./Agents.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { DEFAULT_AUDIT_RETENTION_DAYS, type IdentityProvider, type UpdateSettings } from "./Domain/EnvironmentSettings.js"
import { EnvironmentSettingsRepo, type SettingsRow } from "./EnvironmentSettings/Repo.js"
import { invalid } from "./Kernel/Errors.js"
import { toIso } from "./Kernel/Ids.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { Destinations } from "./Outbound/Destinations.js"

const toSettings = (row: SettingsRow | undefined) => ({
  object: "settings" as const,
  identity_provider: row?.identity_provider ?? null,
  default_model_profile_id: row?.default_model_profile_id ?? null,
  audit_retention_days: row?.audit_retention_days ?? DEFAULT_AUDIT_RETENTION_DAYS,
  updated_at: row === undefined ? null : toIso(row.updated_at)
})

export class EnvironmentSettings extends Effect.Service<EnvironmentSettings>()("EnvironmentSettings", {
  effect: Effect.gen(function*() {
    const repo = yield* EnvironmentSettingsRepo
    const destinations = yield* Destinations
    const agents = yield* Agents

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
        return toSettings(yield* repo.update(p, body, new Date(yield* Clock.currentTimeMillis)))
      })

    /** The environment's identity provider, if one is set. */
    const identityProvider = (cell: CellRef) => Effect.map(repo.settings(cell), (row) => row?.identity_provider ?? undefined)

    return {
      get: (cell: CellRef) => dieOnSqlError(get(cell)),
      update: (p: Principal, body: UpdateSettings) => dieOnSqlError(update(p, body)),
      identityProvider: (cell: CellRef) => dieOnSqlError(identityProvider(cell))
    } as const
  }),
  dependencies: [EnvironmentSettingsRepo.Default, Destinations.Default, Agents.Default]
}) {}
