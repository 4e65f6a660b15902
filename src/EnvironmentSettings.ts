/**
 * Environment settings (D9, D16): the tenant's identity provider (whose assertions make actor
 * sessions). A JWKS URL is a customer destination: refused at once unless public HTTPS (D10), and
 * fetched through the guarded dispatcher.
 */
import { Clock, Effect } from "effect"
import { createLocalJWKSet, type JSONWebKeySet } from "jose"

import { dieOnSqlError } from "./Database/Defects.js"
import type { IdentityProvider } from "./Domain/EnvironmentSettings.js"
import { EnvironmentSettingsRepo } from "./EnvironmentSettings/Repo.js"
import { invalid } from "./Kernel/Errors.js"
import { toIso } from "./Kernel/Ids.js"
import type { CellRef } from "./Kernel/Principal.js"
import { Destinations } from "./Outbound/Destinations.js"

export class EnvironmentSettings extends Effect.Service<EnvironmentSettings>()("EnvironmentSettings", {
  effect: Effect.gen(function*() {
    const repo = yield* EnvironmentSettingsRepo
    const destinations = yield* Destinations

    const get = (cell: CellRef) =>
      Effect.map(repo.settings(cell), (row) => ({
        object: "settings" as const,
        identity_provider: row?.identity_provider ?? null,
        updated_at: row === undefined ? null : toIso(row.updated_at)
      }))

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

    const update = (cell: CellRef, body: { identity_provider?: IdentityProvider | null | undefined }) =>
      Effect.gen(function*() {
        if (body.identity_provider) yield* checkProvider(body.identity_provider)
        if (body.identity_provider !== undefined) {
          yield* repo.setIdentityProvider(cell, body.identity_provider, new Date(yield* Clock.currentTimeMillis))
        }
        return yield* get(cell)
      })

    /** The environment's identity provider, if one is set. */
    const identityProvider = (cell: CellRef) => Effect.map(repo.settings(cell), (row) => row?.identity_provider ?? undefined)

    return {
      get: (cell: CellRef) => dieOnSqlError(get(cell)),
      update: (cell: CellRef, body: { identity_provider?: IdentityProvider | null | undefined }) => dieOnSqlError(update(cell, body)),
      identityProvider: (cell: CellRef) => dieOnSqlError(identityProvider(cell))
    } as const
  }),
  dependencies: [EnvironmentSettingsRepo.Default, Destinations.Default]
}) {}
