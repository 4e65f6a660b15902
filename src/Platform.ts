/**
 * The platform plane's operations: tenants, environments, keys, users, service actors and their
 * deletion. Each mutation is one transaction; timestamps come from Effect's Clock so suites drive
 * retention and purge windows with TestClock. SQL lives in src/Platform/Repo.ts.
 */
import { createHash } from "node:crypto"

import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"

import { Cells } from "./Cells/Cells.js"
import { EndRuns } from "./Cells/Protocol.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { type CreatedApiKey, type DeletionJob, ROTATION_GRACE } from "./Domain/Platform.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, Gone, invalid, type NotFound, notFound } from "./Kernel/Errors.js"
import { makeId } from "./Kernel/Ids.js"
import { type Gated, withinCeiling } from "./Kernel/Policy.js"
import { cellKey, type CellRef, type Principal } from "./Kernel/Principal.js"
import { afterCommit, setResponseHeader } from "./Kernel/UnitOfWork.js"
import { KeyCache } from "./Platform/KeyCache.js"
import * as KeySecrets from "./Platform/KeySecrets.js"
import { PlatformRepo } from "./Platform/Repo.js"
import * as Rows from "./Platform/Rows.js"

/** How long one key check answers for every open stream of the key (`keyActive`). */
const KEY_CHECK_SHARED_MS = 1_000

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
    const repo = yield* PlatformRepo
    const config = yield* AppConfig
    // keys this process authenticated lately: forgotten once a change of what they authenticate as
    // committed (other processes hear of it from Postgres, src/Platform/KeyCache.ts)
    const keys = yield* KeyCache
    const keysChanged = afterCommit(keys.forget)

    const queueDeletion = (p: CellRef, resourceType: DeletionJob["resource_type"], resourceId: string, at: Date) =>
      Effect.gen(function*() {
        const row = yield* repo.insertDeletionJob({
          id: yield* makeId("dj"),
          cell: p,
          resourceType,
          resourceId,
          purgeAfter: new Date(at.getTime() + config.purgeDelaySeconds * 1000),
          at
        })
        return Rows.toDeletionJob(row)
      })

    // ---- tenants ----------------------------------------------------------------------------
    const getTenant = (p: Principal) =>
      Effect.flatMap(
        repo.tenant(p.tenantId),
        (row) => row && row.status !== "deleted" ? Effect.succeed(Rows.toTenant(row)) : Effect.fail(notFound("tenant", "tenant_id"))
      )

    const updateTenant = (p: Principal, name: string) =>
      Effect.gen(function*() {
        const row = yield* repo.renameTenant(p.tenantId, name, yield* now)
        if (!row) return yield* notFound("tenant", "tenant_id")
        return Rows.toTenant(row)
      })

    /**
     * Deleting a tenant or an environment denies access at once (D19): its keys are refused from
     * this commit on, and its cells end every unfinished run once it committed.
     */
    const endRunsOf = (ended: ReadonlyArray<CellRef>) =>
      Effect.flatMap(Cells, (cells) => afterCommit(Effect.forEach(ended, (cell) => cells.send(cell, new EndRuns()), { discard: true })))

    const deleteTenant = (p: Principal) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        const environments = yield* repo.markTenantDeleting(p.tenantId, at)
        if (environments === undefined) return yield* conflict("deletion_in_progress", "This tenant is already being deleted")
        yield* keysChanged
        yield* endRunsOf(environments.map((environment) => ({ tenantId: p.tenantId, environment })))
        return yield* queueDeletion(p, "tenant", p.tenantId, at)
      }))

    // ---- environments -----------------------------------------------------------------------
    // One-item lists: no cursor is ever issued, but one sent is still checked (D6: foreign or
    // malformed is 400 `invalid_cursor`).
    const listEnvironments = (p: Principal, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        const after = yield* Cursor.decode(params.cursor, "environments", cellKey(p))
        const row = yield* repo.environment(p.tenantId, p.environment)
        return {
          items: row && row.state !== "deleted" && (after === undefined || row.id < after) ? [Rows.toEnvironment(row)] : [],
          next_cursor: null
        }
      })

    const listTenants = (p: Principal, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        const after = yield* Cursor.decode(params.cursor, "tenants", cellKey(p))
        const tenant = yield* getTenant(p)
        return { items: after === undefined || tenant.id < after ? [tenant] : [], next_cursor: null }
      })

    const getEnvironment = (p: Principal) =>
      Effect.flatMap(repo.environment(p.tenantId, p.environment), (row) =>
        row && row.state !== "deleted"
          ? Effect.succeed(Rows.toEnvironment(row))
          : Effect.fail(notFound("environment", "environment")))

    const deleteEnvironment = (p: Principal) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        const id = yield* repo.markEnvironmentDeleting(p, at)
        if (id === undefined) return yield* conflict("deletion_in_progress", "This environment is already being deleted")
        yield* keysChanged
        yield* endRunsOf([p])
        return yield* queueDeletion(p, "environment", id, at)
      }))

    const getDeletionJob = (p: Principal, id: string) =>
      Effect.flatMap(
        repo.deletionJob(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(Rows.toDeletionJob(row)) : Effect.fail(notFound("deletion job", "deletion_job_id"))
      )

    // ---- api keys ---------------------------------------------------------------------------
    // A key's status (`expired` once its `expires_at` passed) is read on Effect's Clock.
    const listApiKeys = (p: Principal, params: Cursor.ListParams) =>
      Effect.flatMap(now, (at) => Cursor.listPage("api_keys", repo.apiKeys, (row: Rows.ApiKeyRow) => Rows.toApiKey(row, at))(p, params))

    const getApiKey = (p: Principal, id: string) =>
      Effect.gen(function*() {
        const row = yield* repo.apiKey(p.tenantId, p.environment, id)
        if (!row) return yield* notFound("API key", "key_id")
        return Rows.toApiKey(row, yield* now)
      })

    /** Revokes a key and every key derived from it, within the caller's management ceiling. */
    const revokeApiKey = (p: Principal, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const target = yield* repo.lockApiKey(p, id)
        if (!target) return yield* notFound("API key", "key_id")
        yield* withinCeiling(p, target.scopes)
        const at = yield* now
        yield* repo.revokeTree("key", id, "revoked", at)
        yield* keysChanged
        const row = yield* repo.apiKey(p.tenantId, p.environment, id)
        return Rows.toApiKey(row!, at)
      }))

    /**
     * Rotation (D17): a new key with the old one's name, kind and scopes (its secret shown once),
     * and the old key (with the keys derived from it) expiring `graceSeconds` from now. Only an
     * active key that was not rotated yet: a revoked or expired one is 409 `key_not_active`, one
     * already rotated (still in its grace) 409 `key_already_rotated` — one successor per key, and
     * no grace extended by rotating again (revoking it ends the grace at once).
     */
    const rotateApiKey = (p: Principal, id: string, graceSeconds: number) =>
      sql.withTransaction(Effect.gen(function*() {
        const target = yield* repo.lockApiKey(p, id)
        if (!target) return yield* notFound("API key", "key_id")
        yield* withinCeiling(p, target.scopes)
        const at = yield* now
        const status = Rows.keyStatus(target, at)
        if (status !== "active") return yield* conflict("key_not_active", `This API key is ${status}: only an active key can be rotated`)
        if (target.expires_at !== null) {
          return yield* conflict(
            "key_already_rotated",
            `This API key already expires at ${target.expires_at.toISOString()}; rotate the key that replaced it, or revoke this one`
          )
        }
        yield* repo.expireTree(id, new Date(at.getTime() + graceSeconds * 1000))
        yield* keysChanged
        const secret = KeySecrets.generate(p.environment)
        const row = yield* repo.insertRotatedKey({
          id: yield* makeId("key"),
          from: id,
          prefix: KeySecrets.prefixOf(secret),
          secretHash: KeySecrets.hash(secret),
          at
        })
        return { ...Rows.toApiKey(row, at), secret } satisfies CreatedApiKey
      }))

    // ---- users ------------------------------------------------------------------------------
    const listUsers = Cursor.listPage("users", repo.users, Rows.toUser)

    const liveUser = (p: Principal, id: string) =>
      Effect.flatMap(
        repo.user(p.tenantId, p.environment, id),
        (row): Effect.Effect<Rows.UserRow, NotFound | Gone> =>
          !row ? Effect.fail(notFound("user", "user_id")) : row.status === "deleted" ? Effect.fail(tombstoned) : Effect.succeed(row)
      )

    const getUser = (p: Principal, id: string) => Effect.map(liveUser(p, id), Rows.toUser)

    const createUser = (
      p: Principal,
      body: { external_id: string; display_name: string; email?: string | null | undefined }
    ) =>
      sql.withTransaction(Effect.gen(function*() {
        const at = yield* now
        if (yield* repo.tombstoneExists(p, "user", tombstoneKey(body.external_id), at)) return yield* tombstoned
        const row = yield* repo.insertUser({
          id: yield* makeId("user"),
          cell: p,
          externalId: body.external_id,
          displayName: body.display_name,
          email: body.email ?? null,
          at
        })
        if (!row) return yield* conflict("already_exists", "A user with this external_id already exists")
        return Rows.toUser(row)
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
        const row = yield* repo.updateUser(id, { displayName: body.display_name, email: body.email }, yield* now)
        if (!row) return yield* tombstoned
        return Rows.toUser(row)
      })

    /**
     * Denies the user's access at once (status `deleted`, derived keys revoked, tombstone written)
     * and queues the purge of its live data.
     */
    const deleteUser = (p: Principal, id: string) =>
      sql.withTransaction(Effect.gen(function*() {
        const user = yield* liveUser(p, id)
        const at = yield* now
        // Of concurrent deletes only one flips the row (the others re-check it after the first
        // commits and find it deleted), so a user gets one deletion job.
        if (!(yield* repo.markUserDeleted(id, at))) return yield* tombstoned
        // Keys bound to the user and every lease derived from them (derived authority, contract 4 rule 6).
        yield* repo.revokeTree("user", id, "user_deleted", at)
        yield* keysChanged
        yield* repo.writeTombstone({
          cell: p,
          kind: "user",
          key: tombstoneKey(user.external_id ?? id),
          resourceId: id,
          at,
          expiresAt: new Date(at.getTime() + config.tombstoneTtlSeconds * 1000)
        })
        return yield* queueDeletion(p, "user", id, at)
      }))

    // ---- service actors -------------------------------------------------------------------
    const listServiceActors = Cursor.listPage("service_actors", repo.serviceActors, Rows.toServiceActor)

    const getServiceActor = (p: Principal, id: string) =>
      Effect.flatMap(
        repo.serviceActor(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(Rows.toServiceActor(row)) : Effect.fail(notFound("service actor", "service_actor_id"))
      )

    const createServiceActor = (p: CellRef, name: string) =>
      Effect.gen(function*() {
        const row = yield* repo.insertServiceActor({ id: yield* makeId("sa"), cell: p, name, at: yield* now })
        return Rows.toServiceActor(row)
      })

    /**
     * The workspace a key may act in: the quickstart (first) key only in its quickstart workspace
     * (contract part 1); other keys in any workspace of their environment.
     */
    const allowedWorkspace = (p: Principal) =>
      p.kind !== "quickstart"
        ? Effect.succeedNone
        : Effect.map(repo.quickstartWorkspace(p.tenantId, p.environment), (w) => Option.some(w ?? ""))

    /**
     * Key checks of open streams, shared (issue 20): a check made less than KEY_CHECK_SHARED_MS ago,
     * or still in flight, answers every stream of the key, so many streams of one key cost one read
     * a second instead of one each per check interval.
     */
    const keyChecks = new Map<string, { readonly at: number; readonly active: Effect.Effect<boolean> }>()
    const keyActive = (keyId: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const hit = keyChecks.get(keyId)
        if (hit !== undefined && at.getTime() - hit.at < KEY_CHECK_SHARED_MS) return yield* hit.active
        const active = yield* Effect.cached(
          dieOnSqlError(Effect.map(repo.authorization(keyId, null, at), (a) => a === "active"))
        )
        keyChecks.set(keyId, { at: at.getTime(), active })
        if (keyChecks.size > 10_000) {
          for (const [k, v] of keyChecks) if (at.getTime() - v.at >= KEY_CHECK_SHARED_MS) keyChecks.delete(k)
        }
        return yield* active
      })

    return {
      allowedWorkspace: (p: Principal) => dieOnSqlError(allowedWorkspace(p)),
      /**
       * Whether a run may still act (checked before each dispatch), on Effect's Clock: `active`,
       * `revoked` (its key revoked or expired — a rotated key after its grace —, or its user
       * deleted: the run ends `failed`, `authorization_revoked`), or `deleted` (its environment or
       * tenant is being deleted).
       */
      authorization: (run: { readonly key_id: string; readonly user_id: string | null }) =>
        dieOnSqlError(Effect.flatMap(now, (at) => repo.authorization(run.key_id, run.user_id, at))),
      /**
       * Whether a key (with its tenant and environment) may still act (open streams re-check it), as
       * of at most KEY_CHECK_SHARED_MS ago.
       */
      keyActive,
      getTenant: (p: Principal) => dieOnSqlError(getTenant(p)),
      listTenants: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listTenants(p, params)),
      updateTenant: (p: Gated<Principal>, name: string) => dieOnSqlError(updateTenant(p, name)),
      deleteTenant: (p: Gated<Principal>) => dieOnSqlError(Effect.flatMap(deleteTenant(p), withLocation(p))),
      listEnvironments: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listEnvironments(p, params)),
      getEnvironment: (p: Principal) => dieOnSqlError(getEnvironment(p)),
      deleteEnvironment: (p: Gated<Principal>) => dieOnSqlError(Effect.flatMap(deleteEnvironment(p), withLocation(p))),
      getDeletionJob: (p: Principal, id: string) => dieOnSqlError(getDeletionJob(p, id)),
      listApiKeys: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listApiKeys(p, params)),
      getApiKey: (p: Principal, id: string) => dieOnSqlError(getApiKey(p, id)),
      revokeApiKey: (p: Gated<Principal>, id: string) => dieOnSqlError(revokeApiKey(p, id)),
      rotateApiKey: (p: Gated<Principal>, id: string, graceSeconds: number = ROTATION_GRACE.default) =>
        dieOnSqlError(rotateApiKey(p, id, graceSeconds)),
      listUsers: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listUsers(p, params)),
      getUser: (p: Principal, id: string) => dieOnSqlError(getUser(p, id)),
      createUser: (p: Gated<Principal>, body: Parameters<typeof createUser>[1]) => dieOnSqlError(createUser(p, body)),
      updateUser: (p: Gated<Principal>, id: string, body: Parameters<typeof updateUser>[2]) => dieOnSqlError(updateUser(p, id, body)),
      deleteUser: (p: Gated<Principal>, id: string) => dieOnSqlError(Effect.flatMap(deleteUser(p, id), withLocation(p))),
      listServiceActors: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listServiceActors(p, params)),
      getServiceActor: (p: Principal, id: string) => dieOnSqlError(getServiceActor(p, id)),
      createServiceActor: (p: Gated<CellRef>, name: string) => dieOnSqlError(createServiceActor(p, name))
    } as const
  }),
  dependencies: [PlatformRepo.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Platform (scripts/layers.ts) ----
export { Auth } from "./Platform/Auth.js"
export { KeyCache } from "./Platform/KeyCache.js"
export * as KeySecrets from "./Platform/KeySecrets.js"
export { PlatformRepo } from "./Platform/Repo.js"
export * as PlatformRows from "./Platform/Rows.js"
