/**
 * SQL of the platform plane: tenants, environments, keys, users, service actors, tombstones,
 * deletion jobs and the quickstart record. Rows are decoded (src/Platform/Rows.ts); the services
 * decide, this file only reads and writes.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { notFound } from "../Kernel/Errors.js"
import { EnvironmentName } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import type { Scope } from "../Kernel/Scopes.js"
import { Authorization, authorizationOf, authorizationQuery } from "./Queries.js"
import { ApiKeyRow, DeletionJobRow, EnvironmentRow, KeyLookupRow, ServiceActorRow, TenantRow, UserRow } from "./Rows.js"

/** Row shapes decoded on hot paths, made once (a schema made per call is compiled per call). */
const AuthorizationRow = Schema.Struct({ authorization: Authorization })
const GenerationRow = Schema.Struct({ cell_generation: Schema.Number })
const WorkspaceIdRow = Schema.Struct({ workspace_id: Schema.String })

const API_KEY_COLUMNS =
  "id, tenant_id, environment, name, kind, prefix, scopes, parent_key_id, service_actor_id, created_at, revoked_at, expires_at, rotated_from"

export class PlatformRepo extends Effect.Service<PlatformRepo>()("PlatformRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const after = (cursor: string | undefined) => (cursor === undefined ? sql`TRUE` : sql`id < ${cursor}`)
    const keyColumns = sql.literal(API_KEY_COLUMNS)

    // ---- tenants and environments ------------------------------------------------------------
    const tenant = (id: string) => sql`SELECT * FROM tenants WHERE id = ${id}`.pipe(Rows.maybe(TenantRow))

    const renameTenant = (id: string, name: string, at: Date) =>
      sql`UPDATE tenants SET name = ${name}, updated_at = ${at}
          WHERE id = ${id} AND status = 'active' RETURNING *`.pipe(Rows.maybe(TenantRow))

    /**
     * Marks the tenant and all its environments `deleting`: the names of those environments, or
     * undefined when the tenant was not active.
     */
    const markTenantDeleting = (id: string, at: Date) =>
      Effect.gen(function*() {
        const flipped = yield* sql`UPDATE tenants SET status = 'deleting', updated_at = ${at}
                                   WHERE id = ${id} AND status = 'active' RETURNING id`
        if (flipped.length === 0) return undefined
        return yield* sql`UPDATE environments SET state = 'deleting', updated_at = ${at}
                          WHERE tenant_id = ${id} AND state <> 'deleted' RETURNING name`.pipe(
          Rows.all(Schema.Struct({ name: EnvironmentName })),
          Effect.map((rows) => rows.map((r) => r.name))
        )
      })

    const environment = (tenantId: string, name: string) =>
      sql`SELECT * FROM environments WHERE tenant_id = ${tenantId} AND name = ${name}`.pipe(Rows.maybe(EnvironmentRow))

    /** Marks the environment `deleting`; its id, or undefined when it was already deleting or deleted. */
    const markEnvironmentDeleting = (cell: CellRef, at: Date) =>
      sql`UPDATE environments SET state = 'deleting', updated_at = ${at}
          WHERE tenant_id = ${cell.tenantId} AND name = ${cell.environment} AND state NOT IN ('deleting', 'deleted')
          RETURNING id`.pipe(Rows.maybe(Schema.Struct({ id: Schema.String })), Effect.map((r) => r?.id))

    /**
     * A new cell generation (each start of the environment's cell in some process): the new value.
     * The row is locked `FOR UPDATE` first, which waits for the commits of run actors in flight
     * (they hold it `FOR KEY SHARE`, RunStore `commitAll`'s fence): once this commits, a commit of
     * the previous generation is refused.
     */
    const nextCellGeneration = (cell: CellRef) =>
      sql`WITH locked AS (
            SELECT 1 FROM environments WHERE tenant_id = ${cell.tenantId} AND name = ${cell.environment} FOR UPDATE
          )
          UPDATE environments SET cell_generation = cell_generation + 1
          WHERE tenant_id = ${cell.tenantId} AND name = ${cell.environment} AND EXISTS (SELECT 1 FROM locked)
          RETURNING cell_generation`.pipe(
        Rows.maybe(GenerationRow),
        Effect.map((r) => r?.cell_generation ?? 0)
      )

    // ---- keys ----------------------------------------------------------------------------------
    /** The key a secret's hash names, with its tenant's status and environment's state (authentication). */
    const keyBySecretHash = (hash: Uint8Array) =>
      sql`SELECT k.id, k.tenant_id, k.environment, k.scopes, k.kind, k.revoked_at, k.expires_at,
                 t.status AS tenant_status, e.state AS env_state
          FROM api_keys k
          JOIN tenants t ON t.id = k.tenant_id
          JOIN environments e ON e.tenant_id = k.tenant_id AND e.name = k.environment
          WHERE k.secret_hash = ${hash}`.pipe(Rows.maybe(KeyLookupRow))

    /**
     * The key a refused secret is (its hash: a revoked or expired key, a key of an environment
     * being deleted), unless its environment is purged: where a failed authentication is audited.
     * A secret that matches no key is never attributed to one, whatever its prefix (D20).
     */
    const keyOfRefusedSecret = (hash: Uint8Array) =>
      sql`SELECT k.id, k.tenant_id, k.environment
          FROM api_keys k
          JOIN tenants t ON t.id = k.tenant_id
          JOIN environments e ON e.tenant_id = k.tenant_id AND e.name = k.environment
          WHERE k.secret_hash = ${hash} AND t.status <> 'deleted' AND e.state <> 'deleted'`.pipe(
        Rows.maybe(Schema.Struct({ id: Schema.String, tenant_id: Schema.String, environment: EnvironmentName }))
      )

    /**
     * Claims the audit entry of a failed authentication with the key at `at`: true at most once per
     * `seconds` per key, across processes (its row's lock orders concurrent claims).
     */
    const claimFailureAudit = (keyId: string, at: Date, seconds: number) =>
      sql`INSERT INTO key_failure_audits AS a (key_id, audited_at) VALUES (${keyId}, ${at})
          ON CONFLICT (key_id) DO UPDATE SET audited_at = EXCLUDED.audited_at
          WHERE a.audited_at <= EXCLUDED.audited_at - make_interval(secs => ${seconds})
          RETURNING key_id`.pipe(Rows.all(Schema.Struct({ key_id: Schema.String })), Effect.map((rows) => rows.length > 0))

    const apiKeys = (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
      sql`SELECT ${keyColumns} FROM api_keys
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ApiKeyRow))

    const apiKey = (tenantId: string, env: string, id: string) =>
      sql`SELECT ${keyColumns} FROM api_keys
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(ApiKeyRow))

    /** The key, locked for a change (in the caller's transaction). */
    const lockApiKey = (cell: CellRef, id: string) =>
      sql`SELECT ${keyColumns} FROM api_keys
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND id = ${id} FOR UPDATE`
        .pipe(Rows.maybe(ApiKeyRow))

    /** Revokes the keys `roots` selects and every key derived from them (recursively). */
    const revokeTree = (roots: "key" | "user", id: string, reason: string, at: Date) =>
      sql`WITH RECURSIVE tree AS (
            SELECT id FROM api_keys WHERE ${roots === "key" ? sql`id = ${id}` : sql`user_id = ${id}`}
            UNION SELECT k.id FROM api_keys k JOIN tree ON k.parent_key_id = tree.id
          )
          UPDATE api_keys SET revoked_at = ${at}, revoked_reason = ${reason}
          WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL`.pipe(Rows.none)

    /**
     * Sets `expiresAt` on the key and every key derived from it (recursively) that is not revoked,
     * unless one already expires earlier.
     */
    const expireTree = (id: string, expiresAt: Date) =>
      sql`WITH RECURSIVE tree AS (
            SELECT id FROM api_keys WHERE id = ${id}
            UNION SELECT k.id FROM api_keys k JOIN tree ON k.parent_key_id = tree.id
          )
          UPDATE api_keys SET expires_at = LEAST(expires_at, ${expiresAt})
          WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL`.pipe(Rows.none)

    /**
     * The successor of a rotated key: a new secret with the old key's name, kind, scopes, service
     * actor, user and parent, `rotated_from` the old key.
     */
    const insertRotatedKey = (k: { id: string; from: string; prefix: string; secretHash: Uint8Array; at: Date }) =>
      sql`INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, service_actor_id,
                                user_id, parent_key_id, created_at, rotated_from)
          SELECT ${k.id}, tenant_id, environment, name, kind, ${k.prefix}, ${k.secretHash}, scopes, service_actor_id,
                 user_id, parent_key_id, ${k.at}, id
          FROM api_keys WHERE id = ${k.from}
          RETURNING ${keyColumns}`.pipe(Rows.single(ApiKeyRow))

    const insertApiKey = (k: {
      id: string
      cell: CellRef
      name: string
      kind: ApiKeyRow["kind"]
      prefix: string
      secretHash: Uint8Array
      scopes: ReadonlyArray<Scope>
      serviceActorId: string | null
      at: Date
    }) =>
      sql`INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, service_actor_id, created_at)
          VALUES (${k.id}, ${k.cell.tenantId}, ${k.cell.environment}, ${k.name}, ${k.kind}, ${k.prefix}, ${k.secretHash},
                  ${[...k.scopes] as Array<string>}::text[], ${k.serviceActorId}, ${k.at})
          RETURNING ${keyColumns}`.pipe(Rows.single(ApiKeyRow))

    /**
     * Whether a run may still act at `at`, in one statement: `deleted` when its tenant or
     * environment is being deleted; `revoked` when the key that created it is revoked or expired
     * (its `expires_at` is not after `at`), its environment is not ready, or its acting user (if
     * any) is deleted; else `active`.
     */
    const authorization = (keyId: string, userId: string | null, at: Date) =>
      authorizationQuery(sql, keyId, userId, at).pipe(Rows.maybe(AuthorizationRow), Effect.map((r) => authorizationOf(r?.authorization)))

    // ---- users, tombstones and service actors --------------------------------------------------
    const users = (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
      sql`SELECT * FROM users
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND status = 'active' AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(UserRow))

    const user = (tenantId: string, env: string, id: string) =>
      sql`SELECT * FROM users WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(UserRow))

    /** A new active user; undefined when its external_id is taken. */
    const insertUser = (u: {
      id: string
      cell: CellRef
      externalId: string
      displayName: string
      email: string | null
      at: Date
    }) =>
      sql`INSERT INTO users (id, tenant_id, environment, external_id, display_name, email, status, created_at, updated_at)
          VALUES (${u.id}, ${u.cell.tenantId}, ${u.cell.environment}, ${u.externalId}, ${u.displayName}, ${u.email},
                  'active', ${u.at}, ${u.at})
          ON CONFLICT DO NOTHING RETURNING *`.pipe(Rows.maybe(UserRow))

    /** Changes the given fields of an active user; undefined when it is not active. */
    const updateUser = (id: string, change: { displayName?: string | undefined; email?: string | null | undefined }, at: Date) =>
      sql`UPDATE users SET
            display_name = COALESCE(${change.displayName ?? null}, display_name),
            email = CASE WHEN ${change.email !== undefined} THEN ${change.email ?? null} ELSE email END,
            updated_at = ${at}
          WHERE id = ${id} AND status = 'active' RETURNING *`.pipe(Rows.maybe(UserRow))

    /** Marks the user deleted; false when another request did first. */
    const markUserDeleted = (id: string, at: Date) =>
      sql`UPDATE users SET status = 'deleted', deleted_at = ${at}, updated_at = ${at}
          WHERE id = ${id} AND status = 'active' RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    const tombstoneExists = (cell: CellRef, kind: string, key: string, at: Date) =>
      sql`SELECT 1 FROM tombstones
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND kind = ${kind}
            AND key = ${key} AND expires_at > ${at}`.pipe(Effect.map((rows) => rows.length > 0))

    const writeTombstone = (t: { cell: CellRef; kind: string; key: string; resourceId: string; at: Date; expiresAt: Date }) =>
      sql`INSERT INTO tombstones (tenant_id, environment, kind, key, resource_id, created_at, expires_at)
          VALUES (${t.cell.tenantId}, ${t.cell.environment}, ${t.kind}, ${t.key}, ${t.resourceId}, ${t.at}, ${t.expiresAt})
          ON CONFLICT (tenant_id, environment, kind, key) DO UPDATE SET resource_id = EXCLUDED.resource_id,
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at`.pipe(Rows.none)

    const serviceActors = (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
      sql`SELECT * FROM service_actors
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ServiceActorRow))

    const serviceActor = (tenantId: string, env: string, id: string) =>
      sql`SELECT * FROM service_actors
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(ServiceActorRow))

    const insertServiceActor = (a: { id: string; cell: CellRef; name: string; at: Date }) =>
      sql`INSERT INTO service_actors (id, tenant_id, environment, name, created_at, updated_at)
          VALUES (${a.id}, ${a.cell.tenantId}, ${a.cell.environment}, ${a.name}, ${a.at}, ${a.at}) RETURNING *`
        .pipe(Rows.single(ServiceActorRow))

    // ---- deletion jobs -------------------------------------------------------------------------
    const insertDeletionJob = (j: {
      id: string
      cell: CellRef
      resourceType: DeletionJobRow["resource_type"]
      resourceId: string
      purgeAfter: Date
      at: Date
    }) =>
      sql`INSERT INTO deletion_jobs (id, tenant_id, environment, resource_type, resource_id, state, purge_after, created_at)
          VALUES (${j.id}, ${j.cell.tenantId}, ${j.cell.environment}, ${j.resourceType}, ${j.resourceId}, 'queued',
                  ${j.purgeAfter}, ${j.at})
          RETURNING *`.pipe(Rows.single(DeletionJobRow))

    const deletionJob = (tenantId: string, env: string, id: string) =>
      sql`SELECT * FROM deletion_jobs WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`
        .pipe(Rows.maybe(DeletionJobRow))

    return {
      tenant,
      renameTenant,
      markTenantDeleting,
      environment,
      /** The environment unless it does not exist or was deleted: 404 `resource_missing` (param `environment`). */
      liveEnvironment: (tenantId: string, name: string) =>
        Effect.flatMap(
          environment(tenantId, name),
          (row) => row !== undefined && row.state !== "deleted" ? Effect.succeed(row) : Effect.fail(notFound("environment", "environment"))
        ),
      markEnvironmentDeleting,
      nextCellGeneration,
      keyBySecretHash,
      keyOfRefusedSecret,
      claimFailureAudit,
      apiKeys,
      apiKey,
      lockApiKey,
      revokeTree,
      expireTree,
      insertRotatedKey,
      insertApiKey,
      authorization,
      users,
      user,
      insertUser,
      updateUser,
      markUserDeleted,
      tombstoneExists,
      writeTombstone,
      serviceActors,
      serviceActor,
      insertServiceActor,
      insertDeletionJob,
      deletionJob,
      /** The quickstart workspace of an environment (where its first key may act), if it has one. */
      quickstartWorkspace: (tenantId: string, env: EnvironmentName) =>
        sql`SELECT workspace_id FROM quickstarts WHERE tenant_id = ${tenantId} AND environment = ${env}`.pipe(
          Rows.maybe(WorkspaceIdRow),
          Effect.map((r) => r?.workspace_id)
        )
    } as const
  })
}) {}
