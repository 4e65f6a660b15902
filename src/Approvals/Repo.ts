/**
 * SQL of approvals (D9). The run actor and the decision handler write them inside the run's commit
 * (RunStore.commitAll `also`), so an approval, its run's status and its events change together.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Approval } from "../Domain/Approvals.js"
import { toIso } from "../Kernel/Ids.js"

export interface ApprovalRow {
  readonly id: string
  readonly tenant_id: string
  readonly environment: string
  readonly run_id: string
  readonly tool_call_id: string
  readonly tool_id: string
  readonly operation: { tool_id: string; connection_id: string; name: string; effect: "write" }
  readonly input: unknown
  readonly destination_url: string
  readonly agent_revision_id: string
  readonly status: "pending" | "approved" | "denied" | "expired"
  readonly reason: string | null
  readonly decided_by: { type: "user"; id: string } | null
  readonly created_at: Date
  readonly expires_at: Date
  readonly decided_at: Date | null
  /** digest of the idempotency scope of the request that decided it (migration 0008) */
  readonly decided_ref: string | null
}

export const toApproval = (r: ApprovalRow): Approval => ({
  id: r.id,
  object: "approval",
  run_id: r.run_id,
  tool_call_id: r.tool_call_id,
  status: r.status,
  operation: r.operation,
  input: r.input,
  destination_url: r.destination_url,
  agent_revision_id: r.agent_revision_id,
  reason: r.reason,
  decided_by: r.decided_by,
  created_at: toIso(r.created_at),
  expires_at: toIso(r.expires_at),
  decided_at: r.decided_at === null ? null : toIso(r.decided_at)
})

export class ApprovalsRepo extends Effect.Service<ApprovalsRepo>()("ApprovalsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const approvalFor = (runId: string, toolCallId: string) =>
      Effect.map(
        sql<ApprovalRow>`SELECT * FROM approvals WHERE run_id = ${runId} AND tool_call_id = ${toolCallId}`,
        (rows) => rows[0]
      )

    const approval = (tenantId: string, environment: string, id: string) =>
      Effect.map(
        sql<ApprovalRow>`SELECT * FROM approvals WHERE id = ${id} AND tenant_id = ${tenantId} AND environment = ${environment}`,
        (rows) => rows[0]
      )

    const insertApproval = (a: Omit<ApprovalRow, "status" | "reason" | "decided_by" | "decided_at" | "decided_ref">) =>
      sql`INSERT INTO approvals (id, tenant_id, environment, run_id, tool_call_id, tool_id, operation, input,
                                 destination_url, agent_revision_id, status, created_at, expires_at)
          VALUES (${a.id}, ${a.tenant_id}, ${a.environment}, ${a.run_id}, ${a.tool_call_id}, ${a.tool_id},
                  ${JSON.stringify(a.operation)}::jsonb, ${JSON.stringify(a.input)}::jsonb, ${a.destination_url},
                  ${a.agent_revision_id}, 'pending', ${a.created_at}, ${a.expires_at})`

    const decideApproval = (
      id: string,
      status: "approved" | "denied" | "expired",
      at: Date,
      decidedBy: { type: "user"; id: string } | null,
      reason: string | null,
      ref: string | null = null
    ) =>
      sql`UPDATE approvals SET status = ${status}, decided_at = ${at}, reason = ${reason}, decided_ref = ${ref},
                               decided_by = ${decidedBy === null ? null : JSON.stringify(decidedBy)}::jsonb
          WHERE id = ${id} AND status = 'pending'`

    /** The run's pending approval, if any. */
    const pendingOf = (runId: string) =>
      Effect.map(
        sql<ApprovalRow>`SELECT * FROM approvals WHERE run_id = ${runId} AND status = 'pending' ORDER BY created_at LIMIT 1`,
        (rows) => rows[0]
      )

    /** Pending approvals of a run (at most one at a time), e.g. to expire them with the run. */
    const expirePending = (runId: string, at: Date) =>
      sql`UPDATE approvals SET status = 'expired', decided_at = ${at} WHERE run_id = ${runId} AND status = 'pending'`

    const listApprovals = (
      tenantId: string,
      environment: string,
      after: string | undefined,
      limit: number,
      filter: { status?: string | undefined; run_id?: string | undefined }
    ) =>
      sql<ApprovalRow>`
        SELECT * FROM approvals WHERE tenant_id = ${tenantId} AND environment = ${environment}
        ${filter.status === undefined ? sql`` : sql`AND status = ${filter.status}`}
        ${filter.run_id === undefined ? sql`` : sql`AND run_id = ${filter.run_id}`}
        ${after === undefined ? sql`` : sql`AND id < ${after}`}
        ORDER BY id DESC LIMIT ${limit + 1}`

    return { approvalFor, approval, insertApproval, decideApproval, pendingOf, expirePending, listApprovals } as const
  })
}) {}
