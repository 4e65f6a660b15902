/** SQL of the operator plane: pilot applications, tenants and environments it creates, quickstart records. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { EnvironmentName } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"

export const PilotRow = Schema.Struct({
  id: Schema.String,
  organization_name: Schema.String,
  contact_email: Schema.String,
  status: Schema.Literal("submitted", "approved", "rejected"),
  tenant_id: Schema.NullOr(Schema.String),
  created_at: Rows.Time
})
export type PilotRow = typeof PilotRow.Type

/** An application as the operator console's queue shows it: with its decision's reason and decider. */
export const PilotQueueRow = Schema.Struct({
  ...PilotRow.fields,
  decision_reason: Schema.NullOr(Schema.String),
  decided_by: Schema.NullOr(Schema.String)
})
export type PilotQueueRow = typeof PilotQueueRow.Type

export const QuickstartRow = Schema.Struct({
  service_actor_id: Schema.String,
  workspace_id: Schema.String,
  agent_revision_id: Schema.String
})
export type QuickstartRow = typeof QuickstartRow.Type

/** A cell's weight an operator set (issue 36). */
export const CellWeightRow = Schema.Struct({
  tenant_id: Schema.String,
  environment: Schema.String,
  weight: Schema.Number
})
export type CellWeightRow = typeof CellWeightRow.Type

/** A tenant's environment as the operator console's tenants page lists it (issue 39). */
export const TenantEnvironmentRow = Schema.Struct({
  tenant_id: Schema.String,
  name: Schema.String,
  status: Schema.String,
  created_at: Rows.Time,
  environment: Schema.NullOr(Schema.String),
  state: Schema.NullOr(Schema.String)
})
export type TenantEnvironmentRow = typeof TenantEnvironmentRow.Type

/** A run as a list of an environment's recent runs shows it: its state and why. */
export const RecentRunRow = Schema.Struct({
  id: Schema.String,
  status: Schema.String,
  status_reason: Schema.NullOr(Schema.String),
  created_at: Rows.Time,
  completed_at: Rows.TimeOrNull
})
export type RecentRunRow = typeof RecentRunRow.Type

export class OperatorRepo extends Effect.Service<OperatorRepo>()("OperatorRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    /** A live environment of an active tenant (the operator's view of "exists"). */
    const live = sql`t.status = 'active' AND e.state NOT IN ('deleting', 'deleted')`

    const insertPilot = (p: { id: string; organizationName: string; contactEmail: string; at: Date }) =>
      sql`INSERT INTO pilot_applications (id, organization_name, contact_email, status, created_at)
          VALUES (${p.id}, ${p.organizationName}, ${p.contactEmail}, 'submitted', ${p.at}) RETURNING *`
        .pipe(Rows.single(PilotRow))

    const pilot = (id: string) => sql`SELECT * FROM pilot_applications WHERE id = ${id}`.pipe(Rows.maybe(PilotRow))

    const lockPilot = (id: string) => sql`SELECT * FROM pilot_applications WHERE id = ${id} FOR UPDATE`.pipe(Rows.maybe(PilotRow))

    /** The applications of a status (all: null), oldest first, and the count of each status. */
    const pilots = (status: PilotRow["status"] | null, limit: number) =>
      Effect.all({
        rows: sql`SELECT * FROM pilot_applications ${status === null ? sql`` : sql`WHERE status = ${status}`}
                  ORDER BY created_at, id LIMIT ${limit}`.pipe(Rows.all(PilotQueueRow)),
        counts: sql`SELECT status, count(*)::int AS n FROM pilot_applications GROUP BY status`.pipe(
          Rows.all(Schema.Struct({ status: Schema.String, n: Schema.Number }))
        )
      })

    /** A submitted application rejected (false: it was decided already), with why and by whom. */
    const rejectPilot = (d: { id: string; reason: string; by: string; at: Date }) =>
      sql`UPDATE pilot_applications SET status = 'rejected', decision_reason = ${d.reason}, decided_by = ${d.by},
                                        decided_at = ${d.at}
          WHERE id = ${d.id} AND status = 'submitted' RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    /** Who approved an application (the console's approval; the token's is `operator`). */
    const approvedBy = (d: { id: string; reason: string | null; by: string }) =>
      sql`UPDATE pilot_applications SET decision_reason = ${d.reason}, decided_by = ${d.by}
          WHERE id = ${d.id} AND status = 'approved' AND decided_by IS NULL`.pipe(Rows.none)

    /** The tenant of an approved application with its `sandbox` environment in `provisioning`. */
    const createTenant = (t: { pilotId: string; tenantId: string; environmentId: string; name: string; at: Date }) =>
      Effect.all([
        sql`INSERT INTO tenants (id, name, status, created_at, updated_at)
            VALUES (${t.tenantId}, ${t.name}, 'active', ${t.at}, ${t.at})`,
        sql`INSERT INTO environments (tenant_id, name, id, state, created_at, updated_at)
            VALUES (${t.tenantId}, 'sandbox', ${t.environmentId}, 'provisioning', ${t.at}, ${t.at})`,
        sql`UPDATE pilot_applications SET status = 'approved', tenant_id = ${t.tenantId}, decided_at = ${t.at}
            WHERE id = ${t.pilotId}`
      ], { discard: true })

    /** `provisioning` -> `ready` once the cell's resources exist. */
    const markReady = (cell: CellRef, at: Date) =>
      sql`UPDATE environments SET state = 'ready', updated_at = ${at}
          WHERE tenant_id = ${cell.tenantId} AND name = ${cell.environment} AND state = 'provisioning'`.pipe(Rows.none)

    /** The environment's state when it is an environment of an active tenant. */
    const environmentState = (cell: CellRef) =>
      sql`SELECT e.state FROM environments e JOIN tenants t ON t.id = e.tenant_id
          WHERE e.tenant_id = ${cell.tenantId} AND e.name = ${cell.environment} AND t.status = 'active'`
        .pipe(Rows.maybe(Schema.Struct({ state: Schema.String })), Effect.map((r) => r?.state))

    const quickstart = (tenantId: string, environment: EnvironmentName) =>
      sql`SELECT q.service_actor_id, q.workspace_id, q.agent_revision_id
          FROM quickstarts q
          JOIN environments e ON e.tenant_id = q.tenant_id AND e.name = q.environment
          JOIN tenants t ON t.id = q.tenant_id
          WHERE q.tenant_id = ${tenantId} AND q.environment = ${environment} AND ${live}`.pipe(Rows.maybe(QuickstartRow))

    /**
     * Locks a live environment against concurrent quickstart makers (`FOR NO KEY UPDATE`, which does
     * not block inserts that merely reference it); false when there is no such environment.
     */
    const lockLiveEnvironment = (tenantId: string, environment: EnvironmentName) =>
      sql`SELECT e.name FROM environments e JOIN tenants t ON t.id = e.tenant_id
          WHERE e.tenant_id = ${tenantId} AND e.name = ${environment} AND ${live}
          FOR NO KEY UPDATE OF e`.pipe(Effect.map((rows) => rows.length > 0))

    const insertQuickstart = (q: {
      cell: CellRef
      serviceActorId: string
      workspaceId: string
      agentId: string
      modelProfileId: string
      agentRevisionId: string
      at: Date
    }) =>
      sql`INSERT INTO quickstarts (tenant_id, environment, service_actor_id, workspace_id, agent_id, model_profile_id,
                                   agent_revision_id, created_at)
          VALUES (${q.cell.tenantId}, ${q.cell.environment}, ${q.serviceActorId}, ${q.workspaceId}, ${q.agentId},
                  ${q.modelProfileId}, ${q.agentRevisionId}, ${q.at})`.pipe(Rows.none)

    /** Sets (a number) or clears (null: the node's CELL_WEIGHTS or 1 again) a cell's weight. */
    const setCellWeight = (cell: CellRef, weight: number | null, at: Date) =>
      weight === null
        ? sql`DELETE FROM cell_weights WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`.pipe(Rows.none)
        : sql`INSERT INTO cell_weights (tenant_id, environment, weight, updated_at)
              VALUES (${cell.tenantId}, ${cell.environment}, ${weight}, ${at})
              ON CONFLICT (tenant_id, environment) DO UPDATE SET weight = EXCLUDED.weight, updated_at = EXCLUDED.updated_at`
          .pipe(Rows.none)

    /** Every weight an operator set (a handful of rows: only the cells not at the default). */
    const cellWeights = sql`SELECT tenant_id, environment, weight FROM cell_weights`.pipe(Rows.all(CellWeightRow))

    /**
     * Tenants (newest first, at most `limit`; `tenantId`: that one only) with each environment and
     * its state: one row per environment, one with null environment for a tenant without any.
     */
    const tenants = (limit: number, tenantId?: string) =>
      sql`SELECT t.id AS tenant_id, t.name, t.status, t.created_at, e.name AS environment, e.state
          FROM (SELECT * FROM tenants ${tenantId === undefined ? sql`` : sql`WHERE id = ${tenantId}`}
                ORDER BY created_at DESC, id LIMIT ${limit}) t
          LEFT JOIN environments e ON e.tenant_id = t.id
          ORDER BY t.created_at DESC, t.id, e.name`.pipe(Rows.all(TenantEnvironmentRow))

    /** The environment's latest runs (at most `limit`), newest first. */
    const recentRuns = (cell: CellRef, limit: number) =>
      sql`SELECT id, status, status_reason, created_at, completed_at FROM runs
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}
          ORDER BY created_at DESC, id DESC LIMIT ${limit}`.pipe(Rows.all(RecentRunRow))

    return {
      tenants,
      recentRuns,
      setCellWeight,
      cellWeights,
      insertPilot,
      pilots,
      rejectPilot,
      approvedBy,
      pilot,
      lockPilot,
      createTenant,
      markReady,
      environmentState,
      quickstart,
      lockLiveEnvironment,
      insertQuickstart
    } as const
  })
}) {}
