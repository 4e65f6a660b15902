/**
 * Schema migrations (@effect/sql Migrator), run at start. Two processes starting at once are
 * serialised by a session-level advisory lock held on a reserved connection: the second waits,
 * then finds nothing left to do.
 */
import { Migrator, SqlClient } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"

import platform from "./migrations/0001_platform.js"
import agents from "./migrations/0002_agents.js"
import quickstart from "./migrations/0003_quickstart.js"
import runs from "./migrations/0004_runs.js"
import purge from "./migrations/0005_purge.js"
import eventPayloads from "./migrations/0006_event_payloads.js"
import tools from "./migrations/0007_tools.js"
import requestRefs from "./migrations/0008_request_refs.js"
import usedAssertions from "./migrations/0009_used_assertions.js"
import atomicIdempotency from "./migrations/0010_atomic_idempotency.js"
import webhooks from "./migrations/0011_webhooks.js"
import auditSettings from "./migrations/0012_audit_settings.js"
import files from "./migrations/0013_files.js"
import memory from "./migrations/0014_memory.js"
import schedules from "./migrations/0015_schedules.js"
import usageRecords from "./migrations/0016_usage_records.js"
import keyRotation from "./migrations/0017_key_rotation.js"
import productionRequests from "./migrations/0018_production_requests.js"
import quotas from "./migrations/0019_quotas.js"
import cellPlacements from "./migrations/0020_cell_placements.js"
import idempotencyGate from "./migrations/0021_idempotency_gate.js"
import tenantBounds from "./migrations/0022_tenant_bounds.js"
import workspaceStorage from "./migrations/0023_workspace_storage.js"
import webhookEvents from "./migrations/0024_webhook_events.js"
import environmentLimits from "./migrations/0025_environment_limits.js"
import keyFailureAudits from "./migrations/0027_key_failure_audits.js"
import cellWeights from "./migrations/0028_cell_weights.js"
import eventNotes from "./migrations/0029_event_notes.js"
import console_ from "./migrations/0030_console.js"
import operatorConsole from "./migrations/0031_operator_console.js"
import operatorTokens from "./migrations/0032_operator_tokens.js"
import authNotify from "./migrations/0033_auth_notify.js"
import queuedUnannounced from "./migrations/0034_queued_unannounced.js"
import idempotencyClaim from "./migrations/0035_idempotency_claim.js"
import * as Rows from "./Rows.js"

const MIGRATION_LOCK = 7_204_871_337

export const loader = Migrator.fromRecord({
  "0001_platform": platform,
  "0002_agents": agents,
  "0003_quickstart": quickstart,
  "0004_runs": runs,
  "0005_purge": purge,
  "0006_event_payloads": eventPayloads,
  "0007_tools": tools,
  "0008_request_refs": requestRefs,
  "0009_used_assertions": usedAssertions,
  "0010_atomic_idempotency": atomicIdempotency,
  "0011_webhooks": webhooks,
  "0012_audit_settings": auditSettings,
  "0013_files": files,
  "0014_memory": memory,
  "0015_schedules": schedules,
  "0016_usage_records": usageRecords,
  "0017_key_rotation": keyRotation,
  "0018_production_requests": productionRequests,
  "0019_quotas": quotas,
  "0020_cell_placements": cellPlacements,
  "0021_idempotency_gate": idempotencyGate,
  "0022_tenant_bounds": tenantBounds,
  "0023_workspace_storage": workspaceStorage,
  "0024_webhook_events": webhookEvents,
  "0025_environment_limits": environmentLimits,
  "0027_key_failure_audits": keyFailureAudits,
  "0028_cell_weights": cellWeights,
  "0029_event_notes": eventNotes,
  "0030_console": console_,
  "0031_operator_console": operatorConsole,
  "0032_operator_tokens": operatorTokens,
  "0033_auth_notify": authNotify,
  "0034_queued_unannounced": queuedUnannounced,
  "0035_idempotency_claim": idempotencyClaim
})

const migrate = Migrator.make({})

/**
 * In the scope, the processes of one database migrate one at a time: the advisory lock, held on a
 * reserved connection until the scope closes. Also for the cluster library's own tables
 * (src/Runtime/Cluster.ts), whose migrator is not safe when several nodes start at once.
 */
export const migrationLock = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const conn = yield* sql.reserve
  yield* Effect.acquireRelease(
    conn.executeRaw(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`, []),
    () => Effect.orDie(conn.executeRaw(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`, []))
  )
})

export const run = Effect.scoped(Effect.zipRight(migrationLock, migrate({ loader }))).pipe(Effect.withSpan("Migrations.run"))

export const layer = Layer.effectDiscard(Effect.orDie(run))

/** Whether every migration this build knows is applied (readiness). */
export const applied = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const expected = (yield* loader).length
  const { n } = yield* sql`SELECT count(*)::int AS n FROM effect_sql_migrations`.pipe(
    Rows.single(Schema.Struct({ n: Schema.Number }))
  )
  return n >= expected
})
