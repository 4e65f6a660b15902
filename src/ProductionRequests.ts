/**
 * The production request (D17). A tenant submits one from its sandbox (`POST P/production-request`,
 * at most one open per tenant) and reads its latest; an operator approves or rejects it
 * (`/operator/v1/production-requests/{id}/approve|reject`). Approval provisions the tenant's
 * `production` environment as the pilot approval provisions the sandbox (src/Operator.ts): the
 * environment in `provisioning`, its quickstart resources, then `ready`; it has no keys until an
 * operator makes one (their secrets are `sk_live_...`). A decision is announced to the sandbox's
 * webhook endpoints (`production_request.decided`) in the decision's transaction.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"

import { dieOnSqlError } from "./Database/Defects.js"
import type {
  CreateProductionRequest,
  OperatorProductionRequest,
  ProductionRequest,
  ProductionRequestStatus
} from "./Domain/ProductionRequests.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, notFound } from "./Kernel/Errors.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { CellRef } from "./Kernel/Principal.js"
import { auditAbout } from "./Kernel/UnitOfWork.js"
import { OperatorRepo, Quickstarts } from "./Operator.js"
import { type ProductionRequestRow, ProductionRequestsRepo } from "./ProductionRequests/Repo.js"
import { WebhooksRepo } from "./Webhooks.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

export const toProductionRequest = (r: ProductionRequestRow): ProductionRequest => ({
  id: r.id,
  object: "production_request",
  status: r.status,
  use_case: r.use_case,
  expected_monthly_runs: r.expected_monthly_runs,
  contact_email: r.contact_email,
  created_at: toIso(r.created_at),
  decided_at: r.decided_at === null ? null : toIso(r.decided_at),
  decision_reason: r.decision_reason
})

const toOperatorView = (r: ProductionRequestRow): OperatorProductionRequest => ({ ...toProductionRequest(r), tenant_id: r.tenant_id })

/** Environments in which a tenant has production already (a request for it is pointless). */
const HAS_PRODUCTION = new Set(["provisioning", "ready", "suspended", "deleting"])

const OPERATOR_LIST = "operator-production-requests"

export class ProductionRequests extends Effect.Service<ProductionRequests>()("ProductionRequests", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* ProductionRequestsRepo
    const operatorRepo = yield* OperatorRepo
    const quickstarts = yield* Quickstarts
    const webhooks = yield* WebhooksRepo

    // ---- the tenant's side (a sandbox key) -------------------------------------------------------
    const submit = (p: CellRef, body: CreateProductionRequest) =>
      Effect.gen(function*() {
        const production = yield* repo.productionState(p.tenantId)
        if (production !== undefined && HAS_PRODUCTION.has(production)) {
          return yield* conflict("production_environment_exists", `This tenant's production environment exists already (${production})`)
        }
        const row = yield* repo.insertOpen({
          id: yield* makeId("preq"),
          tenantId: p.tenantId,
          useCase: body.use_case,
          expectedMonthlyRuns: body.expected_monthly_runs,
          contactEmail: body.contact_email,
          at: yield* now
        })
        if (row === undefined) {
          return yield* conflict("production_request_open", "This tenant has a production request waiting for a decision already")
        }
        return toProductionRequest(row)
      })

    const latest = (p: CellRef) =>
      Effect.flatMap(
        repo.latest(p.tenantId),
        (row) => row ? Effect.succeed(toProductionRequest(row)) : Effect.fail(notFound("production request"))
      )

    // ---- the operator's side --------------------------------------------------------------------
    const get = (id: string) =>
      Effect.flatMap(repo.byId(id), (row) => row ? Effect.succeed(toOperatorView(row)) : Effect.fail(notFound("production request", "id")))

    const list = (filter: { status?: ProductionRequestStatus | undefined }, params: Cursor.ListParams) =>
      Effect.gen(function*() {
        const after = yield* Cursor.decode(params.cursor, OPERATOR_LIST, "operator")
        const limit = params.limit ?? Cursor.DEFAULT_LIMIT
        return Cursor.page(yield* repo.list(filter, after, limit), limit, OPERATOR_LIST, "operator", toOperatorView)
      })

    /** The locked request, named as the subject of the operator's audit entry (in the sandbox's log). */
    const locked = (id: string) =>
      Effect.gen(function*() {
        const row = yield* repo.lock(id)
        if (!row) return yield* notFound("production request", "id")
        yield* auditAbout({ tenantId: row.tenant_id, environment: "sandbox" })
        return row
      })

    /** Records the decision and announces it to the sandbox's endpoints, in the caller's transaction. */
    const decide = (row: ProductionRequestRow, status: "approved" | "rejected", reason: string | null, at: Date) =>
      Effect.gen(function*() {
        const decided = yield* repo.decide(row.id, { status, reason, at })
        const resource = toProductionRequest(decided)
        yield* webhooks.enqueue({
          cell: { tenantId: row.tenant_id, environment: "sandbox" },
          type: "production_request.decided",
          eventId: yield* makeId("evt"),
          at,
          data: resource
        })
        yield* Effect.logInfo(`production request ${status}`).pipe(
          Effect.annotateLogs({ production_request_id: row.id, tenant_id: row.tenant_id })
        )
        return decided
      })

    /**
     * Approval: the `production` environment in `provisioning` and the decision (with its webhook
     * event) in one transaction, then the environment's quickstart resources, then `ready`.
     * Approving again answers with the same request, creates nothing twice and finishes a
     * provisioning an earlier approval left half done. A rejected request is 409 `already_decided`.
     */
    const approve = (id: string) =>
      Effect.gen(function*() {
        const approved = yield* sql.withTransaction(Effect.gen(function*() {
          const row = yield* locked(id)
          if (row.status === "approved") return row
          if (row.status === "rejected") return yield* conflict("already_decided", "This production request was rejected")
          if (!(yield* repo.tenantActive(row.tenant_id))) {
            return yield* conflict("tenant_not_active", "The tenant of this production request is being deleted")
          }
          const at = yield* now
          const state = yield* repo.provisionProduction({ tenantId: row.tenant_id, environmentId: yield* makeId("env"), at })
          if (state === "deleting") {
            return yield* conflict(
              "environment_deleting",
              "The tenant's production environment is being deleted; approve once it is purged"
            )
          }
          return yield* decide(row, "approved", null, at)
        }))
        const cell = { tenantId: approved.tenant_id, environment: "production" } as const
        // An environment deleted since an earlier approval has nothing left to provision.
        yield* quickstarts.ensure(cell.tenantId, cell.environment).pipe(Effect.catchTag("NotFound", () => Effect.void))
        yield* operatorRepo.markReady(cell, yield* now)
        return toOperatorView(approved)
      })

    /** Rejection records the reason; the tenant may submit a new request. Rejecting again answers the same. */
    const reject = (id: string, reason: string | null) =>
      sql.withTransaction(Effect.gen(function*() {
        const row = yield* locked(id)
        if (row.status === "rejected") return toOperatorView(row)
        if (row.status === "approved") return yield* conflict("already_decided", "This production request was approved")
        return toOperatorView(yield* decide(row, "rejected", reason, yield* now))
      }))

    return {
      submit: (p: Gated<CellRef>, body: CreateProductionRequest) => dieOnSqlError(submit(p, body)),
      latest: (p: CellRef) => dieOnSqlError(latest(p)),
      get: (id: string) => dieOnSqlError(get(id)),
      list: (filter: { status?: ProductionRequestStatus | undefined }, params: Cursor.ListParams) => dieOnSqlError(list(filter, params)),
      approve: (id: string) => dieOnSqlError(approve(id)),
      reject: (id: string, reason?: string | undefined) => dieOnSqlError(reject(id, reason ?? null))
    } as const
  }),
  dependencies: [ProductionRequestsRepo.Default, OperatorRepo.Default, Quickstarts.Default, WebhooksRepo.Default]
}) {}
