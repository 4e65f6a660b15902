/**
 * Who may touch what. A key sees only its own tenant and environment: anything else is 404 with
 * the same body shape as a missing resource (D3), never 403.
 */
import type { HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

import { type Conflict, missingScope, NotFound, PermissionDenied } from "./Errors.js"
import type { EnvironmentName } from "./Ids.js"
import { type CellRef, CurrentPrincipal, type Principal } from "./Principal.js"
import type { Scope } from "./Scopes.js"
import { type RefineReplay, UnitOfWork } from "./UnitOfWork.js"

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

/**
 * Scopes a request needs beyond those its operation declares, for what its body asks (enabling a
 * schedule needs `runs:write`): 403 `missing_scope` as the ServiceKey middleware answers, and like
 * it before the handler's tenancy check and idempotency gate.
 */
export const requireScopes = (scopes: ReadonlyArray<Scope>): Effect.Effect<void, PermissionDenied, CurrentPrincipal> =>
  Effect.flatMap(CurrentPrincipal, (p) => {
    const missing = scopes.filter((s) => !p.scopes.includes(s))
    return missing.length > 0 ? Effect.fail(missingScope(missing)) : Effect.void
  })

declare const gatePassed: unique symbol

/**
 * A principal as `inCell` and `inTenant` give it to a handler: its request is of the caller's own
 * tenant (and environment) and, a mutation, passed its idempotency gate (its effect runs only past
 * the gate). A capability's mutations take their principal `Gated`, so a handler that skips the
 * gate (a principal read from `CurrentPrincipal`, or made up) does not compile; only this module
 * gives the brand.
 */
export type Gated<P> = P & { readonly [gatePassed]: true }

/**
 * The operator plane acting on a cell (provisioning its quickstart): not a `/v1` request, so it has
 * no idempotency gate; its POST runs in one audited transaction (src/Edge/Pipeline.ts), and what it
 * creates is keyed by the cell (one quickstart per environment).
 */
export const byOperator = <P extends CellRef>(cell: P): Gated<P> => cell as Gated<P>

/** The request of an operation under `/v1/tenants/{tenant_id}/environments/{environment}`. */
export interface CellRequest {
  readonly path: { readonly tenant_id: string; readonly environment: EnvironmentName }
}

/**
 * Past the request's checks (the path is the caller's own, scopes and validation passed), a
 * mutation passes its idempotency gate (the `UnitOfWork`'s): a stored response is replayed as it
 * was (or as `refine` reads it), else the handler runs. Reads go straight on.
 */
const gated = <A, E, R>(run: Effect.Effect<A, E, R>, refine?: RefineReplay) => Effect.flatMap(UnitOfWork, (work) => work.gated(run, refine))

/**
 * A handler of an operation of the caller's cell: runs with the principal once the path's tenant
 * and environment are the caller's own (anything else is 404, as a missing resource), and past the
 * idempotency gate of a mutation (`refine`: how a replay of its stored answer is read).
 */
export const inCell = <Req extends CellRequest, A, E, R>(
  handler: (principal: Gated<Principal>, request: Req) => Effect.Effect<A, E, R>,
  refine?: RefineReplay
) =>
(
  request: Req
): Effect.Effect<A | HttpServerResponse.HttpServerResponse, E | NotFound | Conflict, R | CurrentPrincipal | UnitOfWork> =>
  Effect.flatMap(ownCell(request.path.tenant_id, request.path.environment), (p) => gated(handler(p as Gated<Principal>, request), refine))

/** A handler of an operation of the caller's tenant (`/v1/tenants/{tenant_id}`): 404 for another tenant. */
export const inTenant = <Req extends { readonly path: { readonly tenant_id: string } }, A, E, R>(
  handler: (principal: Gated<Principal>, request: Req) => Effect.Effect<A, E, R>
) =>
(
  request: Req
): Effect.Effect<A | HttpServerResponse.HttpServerResponse, E | NotFound | Conflict, R | CurrentPrincipal | UnitOfWork> =>
  Effect.flatMap(ownTenant(request.path.tenant_id), (p) => gated(handler(p as Gated<Principal>, request)))
