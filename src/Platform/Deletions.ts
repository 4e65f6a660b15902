/**
 * The purge worker (contract 4 rules 6-7): deletion jobs whose `purge_after` has come are taken
 * one at a time (`FOR UPDATE SKIP LOCKED`, so several processes share the work) and their live
 * data is removed in one transaction with the job's completion. Expired tombstones are swept too.
 * Both run on Effect's Clock, so a suite drives the 24 h purge window with TestClock.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Clock, Effect, Exit, Schedule } from "effect"

const MAX_ATTEMPTS = 5
const RETRY_BACKOFF_SECONDS = 300

/** A short, operator-readable reason (with the database's own message when there is one). */
const describe = (e: unknown): string => {
  const message = e instanceof Error ? e.message : String(e)
  const cause = e instanceof Error && e.cause instanceof Error ? `: ${e.cause.message}` : ""
  return `${message}${cause}`.slice(0, 500)
}
import { AppConfig } from "../Config/AppConfig.js"
import type { DeletionJobRow } from "./Repo.js"

/** Tables holding a cell's live data by (tenant_id, environment), in an order foreign keys allow. */
const CELL_TABLES = [
  "tool_operations", "approvals", "actor_sessions", "usage_records", "runs", "conversations", "quickstarts",
  "agent_revisions", "agents", "model_profiles", "tools", "connections", "signing_keys", "environment_settings",
  "workspaces", "service_actors", "idempotency_keys"
] as const

export class Deletions extends Effect.Service<Deletions>()("Deletions", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig

    const purgeEnvironment = (tenantId: string, environment: string, at: Date) =>
      Effect.all([
        sql`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ${at}), revoked_reason = COALESCE(revoked_reason, 'environment_deleted'),
                                service_actor_id = NULL
            WHERE tenant_id = ${tenantId} AND environment = ${environment}`,
        sql`UPDATE users SET external_id = NULL, display_name = NULL, email = NULL, status = 'deleted',
                             deleted_at = COALESCE(deleted_at, ${at}), updated_at = ${at}
            WHERE tenant_id = ${tenantId} AND environment = ${environment}`,
        // Runs and agents: everything the customer's users said and the agents answered.
        sql`SELECT set_config('agent_platform.purging', 'on', true)`,
        sql`DELETE FROM conversation_items WHERE conversation_id IN (
              SELECT id FROM conversations WHERE tenant_id = ${tenantId} AND environment = ${environment})`,
        sql`DELETE FROM run_events WHERE run_id IN (
              SELECT id FROM runs WHERE tenant_id = ${tenantId} AND environment = ${environment})`,
        ...CELL_TABLES.map((table) =>
          sql`DELETE FROM ${sql(table)} WHERE tenant_id = ${tenantId} AND environment = ${environment}`),
        sql`UPDATE environments SET state = 'deleted', updated_at = ${at} WHERE tenant_id = ${tenantId} AND name = ${environment}`
      ], { discard: true })

    const purge = (job: DeletionJobRow, at: Date) => {
      switch (job.resource_type) {
        case "user":
          return Effect.all([
            sql`UPDATE users SET external_id = NULL, display_name = NULL, email = NULL, updated_at = ${at}
                WHERE id = ${job.resource_id} AND tenant_id = ${job.tenant_id}`,
            // Stored idempotent responses that carry the user (createUser, updateUser) are live
            // data too: drop them, so neither the store nor a replay keeps the purged fields.
            // (A retry of such a request now meets the tombstone: 410.)
            sql`DELETE FROM idempotency_keys
                WHERE tenant_id = ${job.tenant_id} AND environment = ${job.environment}
                  AND strpos(body, ${`"id":${JSON.stringify(job.resource_id)}`}) > 0
                  AND strpos(body, '"object":"user"') > 0`
          ], { discard: true })
        case "environment":
          return purgeEnvironment(job.tenant_id, job.environment, at)
        case "tenant":
          return Effect.gen(function*() {
            const envs = yield* sql<{ name: string }>`SELECT name FROM environments WHERE tenant_id = ${job.tenant_id}`
            for (const env of envs) yield* purgeEnvironment(job.tenant_id, env.name, at)
            yield* sql`UPDATE tenants SET status = 'deleted', name = '', updated_at = ${at} WHERE id = ${job.tenant_id}`
          })
      }
    }

    /**
     * Runs one due job; false when none is due. The purge runs in a savepoint: a failure rolls it
     * back whole (nothing half-purged), records the error and retries later with backoff; after
     * MAX_ATTEMPTS the job is `failed` (and no longer blocks the jobs behind it).
     */
    const runOne = Effect.gen(function*() {
      const at = new Date(yield* Clock.currentTimeMillis)
      return yield* sql.withTransaction(Effect.gen(function*() {
        const [job] = yield* sql<DeletionJobRow & { attempts: number }>`
          SELECT * FROM deletion_jobs WHERE state IN ('queued', 'running') AND purge_after <= ${at}
          ORDER BY purge_after LIMIT 1 FOR UPDATE SKIP LOCKED`
        if (!job) return false
        const outcome = yield* Effect.exit(sql.withTransaction(purge(job, at)))
        if (Exit.isSuccess(outcome)) {
          yield* sql`UPDATE deletion_jobs SET state = 'succeeded', started_at = COALESCE(started_at, ${at}),
                       completed_at = ${at}, attempts = attempts + 1, error = NULL
                     WHERE id = ${job.id}`
          yield* Effect.logInfo("deletion job succeeded").pipe(Effect.annotateLogs({ job: job.id, resource: job.resource_type }))
          return true
        }
        const attempts = job.attempts + 1
        const error = describe(Cause.squash(outcome.cause))
        const retryAt = new Date(at.getTime() + RETRY_BACKOFF_SECONDS * 1000 * 2 ** (attempts - 1))
        yield* sql`UPDATE deletion_jobs SET
                     state = ${attempts >= MAX_ATTEMPTS ? "failed" : "running"},
                     started_at = COALESCE(started_at, ${at}),
                     completed_at = ${attempts >= MAX_ATTEMPTS ? at : null},
                     purge_after = ${attempts >= MAX_ATTEMPTS ? job.purge_after : retryAt},
                     attempts = ${attempts}, error = ${error}
                   WHERE id = ${job.id}`
        yield* Effect.logError("deletion job attempt failed", outcome.cause).pipe(
          Effect.annotateLogs({ job: job.id, resource: job.resource_type, attempts })
        )
        return true
      }))
    })

    const sweepTombstones = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      sql`DELETE FROM tombstones WHERE expires_at <= ${new Date(now)}`)

    /** Purges everything that is due, then sweeps tombstones past retention. */
    const runDue = Effect.gen(function*() {
      let n = 0
      while (yield* runOne) n++
      yield* sweepTombstones
      return n
    }).pipe(Effect.orDie, Effect.withSpan("Deletions.runDue"))

    yield* runDue.pipe(
      Effect.catchAllCause((cause) => Effect.logError("deletion worker failed", cause)),
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.forkScoped
    )

    return { runDue } as const
  })
}) {}
