/** SQL of production requests (D17, migration 0018) and of the `production` environment an approval makes. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { ProductionRequestStatus } from "../Domain/ProductionRequests.js"

export const ProductionRequestRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  status: ProductionRequestStatus,
  use_case: Schema.String,
  expected_monthly_runs: Schema.Number,
  contact_email: Schema.String,
  decision_reason: Schema.NullOr(Schema.String),
  created_at: Rows.Time,
  decided_at: Rows.TimeOrNull
})
export type ProductionRequestRow = typeof ProductionRequestRow.Type

const COLUMNS = "id, tenant_id, status, use_case, expected_monthly_runs, contact_email, decision_reason, created_at, decided_at"

export class ProductionRequestsRepo extends Effect.Service<ProductionRequestsRepo>()("ProductionRequestsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(COLUMNS)

    /**
     * A new `submitted` request, or undefined when the tenant has an open one already: the unique
     * partial index `production_requests_open` decides, atomically under concurrency.
     */
    const insertOpen = (r: {
      id: string
      tenantId: string
      useCase: string
      expectedMonthlyRuns: number
      contactEmail: string
      at: Date
    }) =>
      sql`INSERT INTO production_requests (id, tenant_id, environment, status, use_case, expected_monthly_runs, contact_email,
                                           created_at)
          VALUES (${r.id}, ${r.tenantId}, 'sandbox', 'submitted', ${r.useCase}, ${r.expectedMonthlyRuns}, ${r.contactEmail},
                  ${r.at})
          ON CONFLICT (tenant_id) WHERE status = 'submitted' DO NOTHING
          RETURNING ${columns}`.pipe(Rows.maybe(ProductionRequestRow))

    /** The tenant's most recent request. */
    const latest = (tenantId: string) =>
      sql`SELECT ${columns} FROM production_requests WHERE tenant_id = ${tenantId} ORDER BY id DESC LIMIT 1`
        .pipe(Rows.maybe(ProductionRequestRow))

    const byId = (id: string) => sql`SELECT ${columns} FROM production_requests WHERE id = ${id}`.pipe(Rows.maybe(ProductionRequestRow))

    /** The request, locked until the deciding transaction ends (two decisions serialise). */
    const lock = (id: string) =>
      sql`SELECT ${columns} FROM production_requests WHERE id = ${id} FOR UPDATE`.pipe(Rows.maybe(ProductionRequestRow))

    /** Every tenant's requests, newest first (keyset on id), optionally of one status. */
    const list = (filter: { status?: ProductionRequestStatus | undefined }, after: string | undefined, limit: number) =>
      sql`SELECT ${columns} FROM production_requests
          WHERE ${filter.status === undefined ? sql`true` : sql`status = ${filter.status}`}
            AND ${after === undefined ? sql`true` : sql`id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ProductionRequestRow))

    /** `submitted` -> `approved` or `rejected`. */
    const decide = (id: string, d: { status: "approved" | "rejected"; reason: string | null; at: Date }) =>
      sql`UPDATE production_requests SET status = ${d.status}, decision_reason = ${d.reason}, decided_at = ${d.at}
          WHERE id = ${id} AND status = 'submitted'
          RETURNING ${columns}`.pipe(Rows.single(ProductionRequestRow))

    /** The state of the tenant's `production` environment, if it has one (a purged one is `deleted`). */
    const productionState = (tenantId: string) =>
      sql`SELECT state FROM environments WHERE tenant_id = ${tenantId} AND name = 'production'`
        .pipe(Rows.maybe(Schema.Struct({ state: Schema.String })), Effect.map((r) => r?.state))

    /** Whether the tenant is active (not being deleted or deleted). */
    const tenantActive = (tenantId: string) =>
      sql`SELECT status FROM tenants WHERE id = ${tenantId}`.pipe(
        Rows.maybe(Schema.Struct({ status: Schema.String })),
        Effect.map((r) => r?.status === "active")
      )

    /**
     * The tenant's `production` environment in `provisioning`: a new row, or a purged (`deleted`)
     * one made anew (with a new id). An environment that is live or being deleted is left as it is;
     * its state is returned.
     */
    const provisionProduction = (p: { tenantId: string; environmentId: string; at: Date }) =>
      Effect.gen(function*() {
        const made = yield* sql`
          INSERT INTO environments (tenant_id, name, id, state, created_at, updated_at)
          VALUES (${p.tenantId}, 'production', ${p.environmentId}, 'provisioning', ${p.at}, ${p.at})
          ON CONFLICT (tenant_id, name) DO UPDATE
            SET id = EXCLUDED.id, state = 'provisioning', created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
            WHERE environments.state = 'deleted'
          RETURNING state`.pipe(Rows.maybe(Schema.Struct({ state: Schema.String })))
        return made?.state ?? (yield* productionState(p.tenantId))
      })

    return { insertOpen, latest, byId, lock, list, decide, productionState, tenantActive, provisionProduction } as const
  })
}) {}
