/** SQL of the platform plane. Rows in, resources out; infrastructure errors are defects. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { notFound } from "../Kernel/Errors.js"
import { type EnvironmentName, toIso } from "../Kernel/Ids.js"
import type { ApiKey, DeletionJob, Environment, ServiceActor, Tenant, User } from "../Domain/Platform.js"
import type { Scope } from "../Kernel/Scopes.js"

export interface TenantRow { id: string; name: string; status: Tenant["status"]; created_at: Date; updated_at: Date }
export interface EnvironmentRow {
  id: string
  tenant_id: string
  name: EnvironmentName
  state: Environment["state"]
  /** incremented each time the environment's cell starts in some process */
  cell_generation: number
  created_at: Date
  updated_at: Date
}
export interface ApiKeyRow {
  id: string
  tenant_id: string
  environment: EnvironmentName
  name: string
  kind: ApiKey["kind"]
  prefix: string
  scopes: ReadonlyArray<Scope>
  parent_key_id: string | null
  service_actor_id: string | null
  created_at: Date
  revoked_at: Date | null
}
export interface UserRow {
  id: string
  external_id: string | null
  display_name: string | null
  email: string | null
  status: "active" | "deleted"
  created_at: Date
  updated_at: Date
}
export interface ServiceActorRow { id: string; name: string; created_at: Date; updated_at: Date }
export interface DeletionJobRow {
  id: string
  tenant_id: string
  environment: string
  resource_type: DeletionJob["resource_type"]
  resource_id: string
  state: DeletionJob["state"]
  created_at: Date
  purge_after: Date
  started_at: Date | null
  completed_at: Date | null
  error: string | null
}

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
export const toApiKey = (r: ApiKeyRow): ApiKey => ({
  id: r.id,
  object: "api_key",
  tenant_id: r.tenant_id,
  environment: r.environment,
  name: r.name,
  kind: r.kind,
  prefix: r.prefix,
  scopes: r.scopes,
  status: r.revoked_at === null ? "active" : "revoked",
  parent_key_id: r.parent_key_id,
  service_actor_id: r.service_actor_id,
  created_at: toIso(r.created_at),
  revoked_at: iso(r.revoked_at)
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

export const API_KEY_COLUMNS =
  "id, tenant_id, environment, name, kind, prefix, scopes, parent_key_id, service_actor_id, created_at, revoked_at"

export class PlatformRepo extends Effect.Service<PlatformRepo>()("PlatformRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const after = (cursor: string | undefined) => (cursor === undefined ? sql`TRUE` : sql`id < ${cursor}`)

    const environment = (tenantId: string, name: string) =>
      sql<EnvironmentRow>`SELECT * FROM environments WHERE tenant_id = ${tenantId} AND name = ${name}`.pipe(
        Effect.map((r) => r[0])
      )

    return {
      tenant: (id: string) => sql<TenantRow>`SELECT * FROM tenants WHERE id = ${id}`.pipe(Effect.map((r) => r[0])),
      environment,
      /** The environment unless it does not exist or was deleted: 404 `resource_missing` (param `environment`). */
      liveEnvironment: (tenantId: string, name: string) =>
        Effect.flatMap(environment(tenantId, name), (row) =>
          row !== undefined && row.state !== "deleted" ? Effect.succeed(row) : Effect.fail(notFound("environment", "environment"))),
      apiKeys: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<ApiKeyRow>`SELECT ${sql.literal(API_KEY_COLUMNS)} FROM api_keys
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      apiKey: (tenantId: string, env: string, id: string) =>
        sql<ApiKeyRow>`SELECT ${sql.literal(API_KEY_COLUMNS)} FROM api_keys
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map((r) => r[0])),
      users: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<UserRow>`SELECT * FROM users
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND status = 'active' AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      user: (tenantId: string, env: string, id: string) =>
        sql<UserRow>`SELECT * FROM users WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(
          Effect.map((r) => r[0])
        ),
      serviceActors: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<ServiceActorRow>`SELECT * FROM service_actors
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      serviceActor: (tenantId: string, env: string, id: string) =>
        sql<ServiceActorRow>`SELECT * FROM service_actors
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map((r) => r[0])),
      /**
       * Whether a run may still act: the key that created it is not revoked, its tenant is active
       * and its environment ready, and its acting user (if any) is not deleted. One statement.
       */
      authorizationActive: (keyId: string, userId: string | null) =>
        sql<{ ok: boolean }>`
          SELECT (k.revoked_at IS NULL AND t.status = 'active' AND e.state = 'ready'
                  AND (${userId}::text IS NULL OR EXISTS (
                    SELECT 1 FROM users u WHERE u.id = ${userId} AND u.status <> 'deleted' AND u.deleted_at IS NULL))) AS ok
          FROM api_keys k
          JOIN tenants t ON t.id = k.tenant_id
          JOIN environments e ON e.tenant_id = k.tenant_id AND e.name = k.environment
          WHERE k.id = ${keyId}`.pipe(Effect.map((r) => r[0]?.ok === true)),
      /** The quickstart workspace of an environment (where its first key may act), if it has one. */
      quickstartWorkspace: (tenantId: string, env: string) =>
        sql<{ workspace_id: string }>`SELECT workspace_id FROM quickstarts
          WHERE tenant_id = ${tenantId} AND environment = ${env}`.pipe(Effect.map((r) => r[0]?.workspace_id)),
      deletionJob: (tenantId: string, env: string, id: string) =>
        sql<DeletionJobRow>`SELECT * FROM deletion_jobs
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map((r) => r[0]))
    } as const
  })
}) {}
