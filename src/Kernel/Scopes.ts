import { Schema } from "effect"

/** The scopes of the platform plane (contract part 4, 5): tenants, environments, keys, users, service actors. */
export const PLATFORM_SCOPES = [
  "tenants:read",
  "tenants:write",
  "environments:read",
  "environments:write",
  "keys:read",
  "keys:revoke",
  "users:read",
  "users:write",
  "service-actors:read",
  "service-actors:write"
] as const

/** Every scope a service key may hold (contract part 5, D1, D12-D18). */
export const ALL_SCOPES = [
  ...PLATFORM_SCOPES,
  "connections:read",
  "connections:write",
  "agents:read",
  "agents:write",
  "conversations:read",
  "conversations:write",
  "runs:read",
  "runs:write",
  "approvals:read",
  "approvals:write",
  "actor-sessions:write",
  "files:read",
  "files:write",
  "usage:read",
  "memory:read",
  "memory:write",
  "schedules:read",
  "schedules:write",
  "webhooks:read",
  "webhooks:write",
  "settings:read",
  "settings:write",
  "audit:read"
] as const

export const Scope = Schema.Literal(...ALL_SCOPES).annotations({ identifier: "Scope" })
export type Scope = typeof Scope.Type

/**
 * The first key's abilities (contract part 1, D1): act in its own workspace — conversations, runs,
 * events, cancel, files, usage — and read its own tenant and environment. It cannot configure
 * agents or tools, manage keys or users, or approve writes.
 */
export const QUICKSTART_SCOPES: ReadonlyArray<Scope> = [
  "tenants:read",
  "environments:read",
  "conversations:read",
  "conversations:write",
  "runs:read",
  "runs:write",
  "files:read",
  "files:write",
  "usage:read"
]

export const isScope = (s: string): s is Scope => (ALL_SCOPES as ReadonlyArray<string>).includes(s)
