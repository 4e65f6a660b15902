/**
 * SQL of the purge (contract 4 rules 6-7): due deletion jobs, what each kind of job deletes, and
 * how a job ends. The worker in src/Platform/Deletions.ts decides; this file reads and writes.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { DeletionJobRow } from "./Rows.js"

/** Tables holding a cell's live data by (tenant_id, environment), in an order foreign keys allow. */
export const CELL_TABLES = [
  // a schedule's firings name its runs, and the schedule its last run: both go before the runs
  "schedule_firings",
  "schedules",
  // deliveries before the events they refer to (D20: an event is stored once for its deliveries)
  "webhook_deliveries",
  "webhook_events",
  "webhook_endpoints",
  // a file's chunks go with it (ON DELETE CASCADE); run outputs name their run
  "files",
  "tool_operations",
  "approvals",
  "used_assertions",
  "actor_sessions",
  "usage_records",
  "runs",
  "conversations",
  "quickstarts",
  "agent_revisions",
  "agents",
  "model_profiles",
  "tools",
  "connections",
  "signing_keys",
  "environment_settings",
  // a workspace's memory (D14) goes before the workspace it belongs to
  "workspace_memory",
  "workspaces",
  "service_actors",
  "idempotency_keys",
  // a tenant's production requests are of its sandbox (D17)
  "production_requests",
  // its quotas' limits and counters (D16)
  "quota_limits",
  "quota_usage",
  // the environment's audit log goes with it (D16, D19: nothing of a purged environment is kept)
  "audit_entries"
] as const

export class PurgeRepo extends Effect.Service<PurgeRepo>()("PurgeRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The next due job, locked (`SKIP LOCKED`: several processes share the work). */
    const lockDueJob = (at: Date) =>
      sql`SELECT * FROM deletion_jobs WHERE state IN ('queued', 'running') AND purge_after <= ${at}
          ORDER BY purge_after LIMIT 1 FOR UPDATE SKIP LOCKED`.pipe(Rows.maybe(DeletionJobRow))

    /** Everything of one environment: keys revoked, users anonymised, live data deleted, state `deleted`. */
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
        ...CELL_TABLES.map((table) => sql`DELETE FROM ${sql(table)} WHERE tenant_id = ${tenantId} AND environment = ${environment}`),
        sql`UPDATE environments SET state = 'deleted', updated_at = ${at} WHERE tenant_id = ${tenantId} AND name = ${environment}`
      ], { discard: true })

    /** A deleted user's personal data, and stored responses that carry it. */
    const purgeUser = (job: DeletionJobRow, at: Date) =>
      Effect.all([
        sql`UPDATE users SET external_id = NULL, display_name = NULL, email = NULL, updated_at = ${at}
            WHERE id = ${job.resource_id} AND tenant_id = ${job.tenant_id}`,
        // Stored idempotent responses that carry the user (createUser, updateUser) are live data
        // too: drop them, so neither the store nor a replay keeps the purged fields. (A retry of
        // such a request now meets the tombstone: 410.)
        sql`DELETE FROM idempotency_keys
            WHERE tenant_id = ${job.tenant_id} AND environment = ${job.environment}
              AND strpos(body, ${`"id":${JSON.stringify(job.resource_id)}`}) > 0
              AND strpos(body, '"object":"user"') > 0`
      ], { discard: true })

    const environmentsOf = (tenantId: string) =>
      sql`SELECT name FROM environments WHERE tenant_id = ${tenantId}`.pipe(
        Rows.all(Schema.Struct({ name: Schema.String })),
        Effect.map((rows) => rows.map((r) => r.name))
      )

    const markTenantDeleted = (tenantId: string, at: Date) =>
      sql`UPDATE tenants SET status = 'deleted', name = '', updated_at = ${at} WHERE id = ${tenantId}`.pipe(Rows.none)

    const jobSucceeded = (id: string, at: Date) =>
      sql`UPDATE deletion_jobs SET state = 'succeeded', started_at = COALESCE(started_at, ${at}),
            completed_at = ${at}, attempts = attempts + 1, error = NULL
          WHERE id = ${id}
          RETURNING *`.pipe(Rows.single(DeletionJobRow))

    /** A failed attempt: `failed` for good (completedAt set), or `running` again at `retryAt`. */
    const jobAttemptFailed = (
      id: string,
      attempt: { at: Date; attempts: number; error: string; final: boolean; retryAt: Date }
    ) =>
      sql`UPDATE deletion_jobs SET
            state = ${attempt.final ? "failed" : "running"},
            started_at = COALESCE(started_at, ${attempt.at}),
            completed_at = ${attempt.final ? attempt.at : null},
            purge_after = ${attempt.retryAt},
            attempts = ${attempt.attempts}, error = ${attempt.error}
          WHERE id = ${id}`.pipe(Rows.none)

    const sweepTombstones = (at: Date) => sql`DELETE FROM tombstones WHERE expires_at <= ${at}`.pipe(Rows.none)

    return {
      lockDueJob,
      purgeEnvironment,
      purgeUser,
      environmentsOf,
      markTenantDeleted,
      jobSucceeded,
      jobAttemptFailed,
      sweepTombstones
    } as const
  })
}) {}
