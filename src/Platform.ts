/**
 * The platform plane's operations: tenants, environments, keys, users, service actors and their
 * deletion. Each mutation is one transaction; timestamps come from Effect's Clock so suites drive
 * retention and purge windows with TestClock.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { dieOnSqlError } from "./Database/Defects.js"
import { createHash } from "node:crypto"
import { conflict, Gone, invalid, type NotFound, notFound } from "./Kernel/Errors.js"
import { makeId } from "./Kernel/Ids.js"
import { setResponseHeader } from "./Kernel/RequestContext.js"
import type { DeletionJob } from "./Domain/Platform.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import * as Cursor from "./Kernel/Cursor.js"
import { withinCeiling } from "./Kernel/Policy.js"
import * as Repo from "./Platform/Repo.js"
import { AppConfig } from "./Config/AppConfig.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

export const tombstoneKey = (value: string) => createHash("sha256").update(value).digest("hex")

/** 202 responses carry `Location`: the deletion job to poll. */
const withLocation = (p: CellRef) => (job: DeletionJob) =>
  Effect.as(
    setResponseHeader("location", `/v1/tenants/${p.tenantId}/environments/${p.environment}/deletion-jobs/${job.id}`),
    job
  )

const tombstoned = new Gone({
  code: "tombstoned",
  message: "This resource was deleted; its identifier cannot be reused during the retention period"
})

export class Platform extends Effect.Service<Platform>()("Platform", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* Repo.PlatformRepo
    const config = yield* AppConfig
    const cellOf = (p: Principal) => `${p.tenantId}/${p.environment}`


    const queueDeletion = (
      p: Principal,
      resourceType: "tenant" | "environment" | "user",
      resourceId: string,
      at: Date
    ) =>
      Effect.gen(function*() {
        const id = yield* makeId("dj")
        const purgeAfter = new Date(at.getTime() + config.purgeDelaySeconds * 1000)
        const [row] = yield* sql<Repo.DeletionJobRow>`
          INSERT INTO deletion_jobs (id, tenant_id, environment, resource_type, resource_id, state, purge_after, created_at)
          VALUES (${id}, ${p.tenantId}, ${p.environment}, ${resourceType}, ${resourceId}, 'queued', ${purgeAfter}, ${at})
          RETURNING *`
        return Repo.toDeletionJob(row!)
      })

    // ---- tenants ----------------------------------------------------------------------------
    const getTenant = (p: Principal) =>
      Effect.flatMap(repo.tenant(p.tenantId), (row) =>
        row && row.status !== "deleted" ? Effect.succeed(Repo.toTenant(row)) : Effect.fail(notFound("tenant", "tenant_id")))

    const updateTenant = (p: Principal, name: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const [row] = yield* sql<Repo.TenantRow>`
          UPDATE tenants SET name = ${name}, updated_at = ${at}
          WHERE id = ${p.tenantId} AND status = 'active' RETURNING *`
        if (!row) return yield* notFound("tenant", "tenant_id")
        return Repo.toTenant(row)
      })

    const deleteTenant = (p: Principal) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        const [row] = yield* sql`UPDATE tenants SET status = 'deleting', updated_at = ${at}
                                 WHERE id = ${p.tenantId} AND status = 'active' RETURNING id`
        if (!row) return yield* conflict("deletion_in_progress", "This tenant is already being deleted")
        yield* sql`UPDATE environments SET state = 'deleting', updated_at = ${at}
                   WHERE tenant_id = ${p.tenantId} AND state <> 'deleted'`
        return yield* queueDeletion(p, "tenant", p.tenantId, at)
      }))

    // ---- environments -----------------------------------------------------------------------
    // One-item lists: no cursor is ever issued, but one sent is still checked (D6: foreign or
    // malformed is 400 `invalid_cursor`).
    const listEnvironments = (p: Principal, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        const after = yield* Cursor.decode(params.cursor, "environments", cellOf(p))
        const row = yield* repo.environment(p.tenantId, p.environment)
        return {
          items: row && row.state !== "deleted" && (after === undefined || row.id < after) ? [Repo.toEnvironment(row)] : [],
          next_cursor: null
        }
      })

    const listTenants = (p: Principal, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        const after = yield* Cursor.decode(params.cursor, "tenants", cellOf(p))
        const tenant = yield* getTenant(p)
        return { items: after === undefined || tenant.id < after ? [tenant] : [], next_cursor: null }
      })

    const getEnvironment = (p: Principal) =>
      Effect.flatMap(repo.environment(p.tenantId, p.environment), (row) =>
        row && row.state !== "deleted"
          ? Effect.succeed(Repo.toEnvironment(row))
          : Effect.fail(notFound("environment", "environment")))

    const deleteEnvironment = (p: Principal) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        const [row] = yield* sql`UPDATE environments SET state = 'deleting', updated_at = ${at}
                                 WHERE tenant_id = ${p.tenantId} AND name = ${p.environment}
                                   AND state NOT IN ('deleting', 'deleted') RETURNING id`
        if (!row) return yield* conflict("deletion_in_progress", "This environment is already being deleted")
        return yield* queueDeletion(p, "environment", (row as any).id as string, at)
      }))

    const getDeletionJob = (p: Principal, id: string) =>
      Effect.flatMap(repo.deletionJob(p.tenantId, p.environment, id), (row) =>
        row ? Effect.succeed(Repo.toDeletionJob(row)) : Effect.fail(notFound("deletion job", "deletion_job_id")))

    // ---- api keys ---------------------------------------------------------------------------
    const listApiKeys = Cursor.listPage("api_keys", repo.apiKeys, Repo.toApiKey)

    const getApiKey = (p: Principal, id: string) =>
      Effect.flatMap(repo.apiKey(p.tenantId, p.environment, id), (row) =>
        row ? Effect.succeed(Repo.toApiKey(row)) : Effect.fail(notFound("API key", "key_id")))

    /** Revokes a key and every key derived from it, within the caller's management ceiling. */
    const revokeApiKey = (p: Principal, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const [target] = yield* sql<Repo.ApiKeyRow>`
          SELECT ${sql.literal(Repo.API_KEY_COLUMNS)} FROM api_keys
          WHERE tenant_id = ${p.tenantId} AND environment = ${p.environment} AND id = ${id} FOR UPDATE`
        if (!target) return yield* notFound("API key", "key_id")
        yield* withinCeiling(p, target.scopes)
        const at = yield* now
        yield* sql`
          WITH RECURSIVE tree AS (
            SELECT id FROM api_keys WHERE id = ${id}
            UNION SELECT k.id FROM api_keys k JOIN tree ON k.parent_key_id = tree.id
          )
          UPDATE api_keys SET revoked_at = ${at}, revoked_reason = 'revoked'
          WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL`
        const [row] = yield* sql<Repo.ApiKeyRow>`SELECT ${sql.literal(Repo.API_KEY_COLUMNS)} FROM api_keys WHERE id = ${id}`
        return Repo.toApiKey(row!)
      }))

    // ---- users ------------------------------------------------------------------------------
    const listUsers = Cursor.listPage("users", repo.users, Repo.toUser)

    const liveUser = (p: Principal, id: string) =>
      Effect.flatMap(repo.user(p.tenantId, p.environment, id), (row): Effect.Effect<Repo.UserRow, NotFound | Gone> =>
        !row ? Effect.fail(notFound("user", "user_id")) : row.status === "deleted" ? Effect.fail(tombstoned) : Effect.succeed(row))

    const getUser = (p: Principal, id: string) => Effect.map(liveUser(p, id), Repo.toUser)

    const createUser = (
      p: Principal,
      body: { external_id: string; display_name: string; email?: string | null | undefined }
    ) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        const tomb = yield* sql`SELECT 1 FROM tombstones
          WHERE tenant_id = ${p.tenantId} AND environment = ${p.environment} AND kind = 'user'
            AND key = ${tombstoneKey(body.external_id)} AND expires_at > ${at}`
        if (tomb.length > 0) return yield* tombstoned
        const id = yield* makeId("user")
        const [row] = yield* sql<Repo.UserRow>`
          INSERT INTO users (id, tenant_id, environment, external_id, display_name, email, status, created_at, updated_at)
          VALUES (${id}, ${p.tenantId}, ${p.environment}, ${body.external_id}, ${body.display_name},
                  ${body.email ?? null}, 'active', ${at}, ${at})
          ON CONFLICT DO NOTHING RETURNING *`
        if (!row) return yield* conflict("already_exists", "A user with this external_id already exists")
        return Repo.toUser(row)
      }))

    const updateUser = (
      p: Principal,
      id: string,
      body: { display_name?: string | undefined; email?: string | null | undefined }
    ) =>
      Effect.gen(function*() {
        if (body.display_name === undefined && body.email === undefined) {
          return yield* invalid("parameter_missing", "Send at least one of display_name, email")
        }
        yield* liveUser(p, id)
        const at = yield* now
        const [row] = yield* sql<Repo.UserRow>`
          UPDATE users SET
            display_name = COALESCE(${body.display_name ?? null}, display_name),
            email = CASE WHEN ${body.email !== undefined} THEN ${body.email ?? null} ELSE email END,
            updated_at = ${at}
          WHERE id = ${id} AND status = 'active' RETURNING *`
        if (!row) return yield* tombstoned
        return Repo.toUser(row)
      })

    /**
     * Denies the user's access at once (status `deleted`, derived keys revoked, tombstone written)
     * and queues the purge of its live data.
     */
    const deleteUser = (p: Principal, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const user = yield* liveUser(p, id)
        const at = yield* now
        // `AND status = 'active'`: of concurrent deletes only one flips the row (the others re-check
        // it after the first commits and find it deleted), so a user gets one deletion job.
        const flipped = yield* sql`UPDATE users SET status = 'deleted', deleted_at = ${at}, updated_at = ${at}
                                   WHERE id = ${id} AND status = 'active' RETURNING id`
        if (flipped.length === 0) return yield* tombstoned
        // Keys bound to the user and every lease derived from them (derived authority, contract 4 rule 6).
        yield* sql`
          WITH RECURSIVE tree AS (
            SELECT id FROM api_keys WHERE user_id = ${id}
            UNION SELECT k.id FROM api_keys k JOIN tree ON k.parent_key_id = tree.id
          )
          UPDATE api_keys SET revoked_at = ${at}, revoked_reason = 'user_deleted'
          WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL`
        yield* sql`
          INSERT INTO tombstones (tenant_id, environment, kind, key, resource_id, created_at, expires_at)
          VALUES (${p.tenantId}, ${p.environment}, 'user', ${tombstoneKey(user.external_id ?? id)}, ${id}, ${at},
                  ${new Date(at.getTime() + config.tombstoneTtlSeconds * 1000)})
          ON CONFLICT (tenant_id, environment, kind, key) DO UPDATE SET resource_id = EXCLUDED.resource_id,
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at`
        return yield* queueDeletion(p, "user", id, at)
      }))

    // ---- service actors -------------------------------------------------------------------
    const listServiceActors = Cursor.listPage("service_actors", repo.serviceActors, Repo.toServiceActor)

    const getServiceActor = (p: Principal, id: string) =>
      Effect.flatMap(repo.serviceActor(p.tenantId, p.environment, id), (row) =>
        row ? Effect.succeed(Repo.toServiceActor(row)) : Effect.fail(notFound("service actor", "service_actor_id")))

    const createServiceActor = (p: CellRef, name: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const id = yield* makeId("sa")
        const [row] = yield* sql<Repo.ServiceActorRow>`
          INSERT INTO service_actors (id, tenant_id, environment, name, created_at, updated_at)
          VALUES (${id}, ${p.tenantId}, ${p.environment}, ${name}, ${at}, ${at}) RETURNING *`
        return Repo.toServiceActor(row!)
      })


    /**
     * The workspace a key may act in: the quickstart (first) key only in its quickstart workspace
     * (contract part 1); other keys in any workspace of their environment.
     */
    const allowedWorkspace = (p: Principal) =>
      p.kind !== "quickstart"
        ? Effect.succeedNone
        : Effect.map(repo.quickstartWorkspace(p.tenantId, p.environment), (w) => Option.some(w ?? ""))

    return {
      allowedWorkspace: (p: Principal) => dieOnSqlError(allowedWorkspace(p)),
      /** Whether a run may still act (checked before each dispatch): its key, tenant, environment and user. */
      authorizationActive: (run: { readonly key_id: string; readonly user_id: string | null }) =>
        dieOnSqlError(repo.authorizationActive(run.key_id, run.user_id)),
      /** Whether a key (with its tenant and environment) may still act (open streams re-check it). */
      keyActive: (keyId: string) => dieOnSqlError(repo.authorizationActive(keyId, null)),
      getTenant: (p: Principal) => dieOnSqlError(getTenant(p)),
      listTenants: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listTenants(p, params)),
      updateTenant: (p: Principal, name: string) => dieOnSqlError(updateTenant(p, name)),
      deleteTenant: (p: Principal) => dieOnSqlError(Effect.flatMap(deleteTenant(p), withLocation(p))),
      listEnvironments: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listEnvironments(p, params)),
      getEnvironment: (p: Principal) => dieOnSqlError(getEnvironment(p)),
      deleteEnvironment: (p: Principal) => dieOnSqlError(Effect.flatMap(deleteEnvironment(p), withLocation(p))),
      getDeletionJob: (p: Principal, id: string) => dieOnSqlError(getDeletionJob(p, id)),
      listApiKeys: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listApiKeys(p, params)),
      getApiKey: (p: Principal, id: string) => dieOnSqlError(getApiKey(p, id)),
      revokeApiKey: (p: Principal, id: string) => dieOnSqlError(revokeApiKey(p, id)),
      listUsers: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listUsers(p, params)),
      getUser: (p: Principal, id: string) => dieOnSqlError(getUser(p, id)),
      createUser: (p: Principal, body: Parameters<typeof createUser>[1]) => dieOnSqlError(createUser(p, body)),
      updateUser: (p: Principal, id: string, body: Parameters<typeof updateUser>[2]) => dieOnSqlError(updateUser(p, id, body)),
      deleteUser: (p: Principal, id: string) => dieOnSqlError(Effect.flatMap(deleteUser(p, id), withLocation(p))),
      listServiceActors: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listServiceActors(p, params)),
      getServiceActor: (p: Principal, id: string) => dieOnSqlError(getServiceActor(p, id)),
      createServiceActor: (p: CellRef, name: string) => dieOnSqlError(createServiceActor(p, name))
    } as const
  }),
  dependencies: [Repo.PlatformRepo.Default]
}) {}

