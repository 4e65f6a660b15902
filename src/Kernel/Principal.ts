import { Context } from "effect"

import type { EnvironmentName } from "./Ids.js"
import type { Scope } from "./Scopes.js"

/** Who is calling: an authenticated service key, bound to one tenant and environment. */
export interface Principal {
  readonly keyId: string
  readonly tenantId: string
  readonly environment: EnvironmentName
  readonly scopes: ReadonlyArray<Scope>
  readonly kind: "quickstart" | "console" | "derived"
  /** the actor idempotency and audit are scoped by */
  readonly actor: { readonly type: "api_key"; readonly id: string }
}

export class CurrentPrincipal extends Context.Tag("CurrentPrincipal")<CurrentPrincipal, Principal>() {}

/** The tenant and environment an operation acts in: a Principal, or the operator plane naming a cell. */
export type CellRef = Pick<Principal, "tenantId" | "environment">

/** A cell as one string, `tenant/environment` (map keys, cursors). */
export const cellKey = (cell: { readonly tenantId: string; readonly environment: string }): string => `${cell.tenantId}/${cell.environment}`
