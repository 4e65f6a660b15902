/**
 * Who may touch what. A key sees only its own tenant and environment: anything else is 404 with
 * the same body shape as a missing resource (D3), never 403.
 */
import { Effect } from "effect"
import { NotFound, PermissionDenied } from "./Errors.js"
import type { EnvironmentName } from "./Ids.js"
import { CurrentPrincipal, type Principal } from "./Principal.js"

export const ownTenant = (tenantId: string): Effect.Effect<Principal, NotFound, CurrentPrincipal> =>
  Effect.flatMap(CurrentPrincipal, (p) =>
    p.tenantId === tenantId
      ? Effect.succeed(p)
      : Effect.fail(new NotFound({ code: "resource_missing", message: "No such tenant", param: "tenant_id" })))

export const ownCell = (
  tenantId: string,
  environment: EnvironmentName
): Effect.Effect<Principal, NotFound, CurrentPrincipal> =>
  Effect.flatMap(ownTenant(tenantId), (p) =>
    p.environment === environment
      ? Effect.succeed(p)
      : Effect.fail(new NotFound({ code: "resource_missing", message: "No such environment", param: "environment" })))

/** The management ceiling: a key may act only on keys whose scopes are within its own. */
export const withinCeiling = (
  caller: Principal,
  targetScopes: ReadonlyArray<string>
): Effect.Effect<void, PermissionDenied> =>
  targetScopes.every((s) => (caller.scopes as ReadonlyArray<string>).includes(s))
    ? Effect.void
    : Effect.fail(
      new PermissionDenied({
        code: "outside_management_ceiling",
        message: "That key holds scopes this key does not have; it cannot be managed with this key"
      })
    )
