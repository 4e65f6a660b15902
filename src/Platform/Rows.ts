/** Rows of the platform plane as Postgres returns them (decoded), and the resources they become. */
import { Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import {
  type ApiKey,
  type DeletionJob,
  type Environment,
  EnvironmentState,
  type ServiceActor,
  type Tenant,
  type User
} from "../Domain/Platform.js"
import { EnvironmentName, toIso } from "../Kernel/Ids.js"
import { Scope } from "../Kernel/Scopes.js"

export const TenantRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  status: Schema.Literal("active", "deleting", "deleted"),
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type TenantRow = typeof TenantRow.Type

export const EnvironmentRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  name: EnvironmentName,
  state: EnvironmentState,
  /** incremented each time the environment's cell starts in some process */
  cell_generation: Schema.Number,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type EnvironmentRow = typeof EnvironmentRow.Type

export const ApiKeyRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  name: Schema.String,
  kind: Schema.Literal("quickstart", "console", "derived"),
  prefix: Schema.String,
  scopes: Schema.Array(Scope),
  parent_key_id: Schema.NullOr(Schema.String),
  service_actor_id: Schema.NullOr(Schema.String),
  created_at: Rows.Time,
  revoked_at: Rows.TimeOrNull,
  expires_at: Rows.TimeOrNull,
  rotated_from: Schema.NullOr(Schema.String)
})
export type ApiKeyRow = typeof ApiKeyRow.Type

/** What authenticating a key reads: the key with its tenant's status and its environment's state. */
export const KeyLookupRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  scopes: Schema.Array(Scope),
  kind: Schema.Literal("quickstart", "console", "derived"),
  revoked_at: Rows.TimeOrNull,
  expires_at: Rows.TimeOrNull,
  tenant_status: Schema.String,
  env_state: Schema.String
})
export type KeyLookupRow = typeof KeyLookupRow.Type

export const UserRow = Schema.Struct({
  id: Schema.String,
  external_id: Schema.NullOr(Schema.String),
  display_name: Schema.NullOr(Schema.String),
  email: Schema.NullOr(Schema.String),
  status: Schema.Literal("active", "deleted"),
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type UserRow = typeof UserRow.Type

export const ServiceActorRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type ServiceActorRow = typeof ServiceActorRow.Type

export const DeletionJobRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  resource_type: Schema.Literal("tenant", "environment", "user"),
  resource_id: Schema.String,
  state: Schema.Literal("queued", "running", "succeeded", "failed"),
  attempts: Schema.Number,
  created_at: Rows.Time,
  purge_after: Rows.Time,
  started_at: Rows.TimeOrNull,
  completed_at: Rows.TimeOrNull,
  error: Schema.NullOr(Schema.String)
})
export type DeletionJobRow = typeof DeletionJobRow.Type

const iso = (d: Date | null) => (d === null ? null : toIso(d))

export const toTenant = (r: TenantRow): Tenant => ({
  id: r.id,
  object: "tenant",
  name: r.name,
  status: r.status,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toEnvironment = (r: EnvironmentRow): Environment => ({
  id: r.id,
  object: "environment",
  tenant_id: r.tenant_id,
  name: r.name,
  state: r.state,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
/**
 * A key's status at `at` (Effect's Clock): revoked wins over expired. Without `at` (a key just
 * made, which has no expiry) an expiry is not compared.
 */
export const keyStatus = (r: Pick<ApiKeyRow, "revoked_at" | "expires_at">, at?: Date): ApiKey["status"] =>
  r.revoked_at !== null
    ? "revoked"
    : r.expires_at !== null && at !== undefined && r.expires_at.getTime() <= at.getTime()
    ? "expired"
    : "active"

export const toApiKey = (r: ApiKeyRow, at?: Date): ApiKey => ({
  id: r.id,
  object: "api_key",
  tenant_id: r.tenant_id,
  environment: r.environment,
  name: r.name,
  kind: r.kind,
  prefix: r.prefix,
  scopes: r.scopes,
  status: keyStatus(r, at),
  parent_key_id: r.parent_key_id,
  service_actor_id: r.service_actor_id,
  created_at: toIso(r.created_at),
  revoked_at: iso(r.revoked_at),
  expires_at: iso(r.expires_at),
  rotated_from: r.rotated_from
})
export const toUser = (r: UserRow): User => ({
  id: r.id,
  object: "user",
  external_id: r.external_id ?? "",
  display_name: r.display_name ?? "",
  email: r.email,
  status: "active",
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toServiceActor = (r: ServiceActorRow): ServiceActor => ({
  id: r.id,
  object: "service_actor",
  name: r.name,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toDeletionJob = (r: DeletionJobRow): DeletionJob => ({
  id: r.id,
  object: "deletion_job",
  resource_type: r.resource_type,
  resource_id: r.resource_id,
  state: r.state,
  created_at: toIso(r.created_at),
  purge_after: toIso(r.purge_after),
  started_at: iso(r.started_at),
  completed_at: iso(r.completed_at),
  error: r.error
})
