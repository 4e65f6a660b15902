/**
 * SQL of approvals (D9). The run actor and the decision handler write them inside the run's commit
 * (RunStore.commitAll `also`), so an approval, its run's status and its events change together.
 * Status changes go through one write, `transition`, guarded by the domain's table; an approval
 * that expires is announced (webhook event `approval.expired`, D18) in the same transaction.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { type Approval, type ApprovalEvent, ApprovalStatus, approvalTransition } from "../Domain/Approvals.js"
import { ToolCallOfRun } from "../Domain/Runs.js"
import { makeId, toIso } from "../Kernel/Ids.js"
import { WebhooksRepo } from "../Webhooks.js"

const UserRef = Schema.Struct({ type: Schema.Literal("user"), id: Schema.String })

export const ApprovalRow = Schema.Struct({
  ...ToolCallOfRun,
  operation: Schema.Struct({
    tool_id: Schema.String,
    connection_id: Schema.String,
    name: Schema.String,
    effect: Schema.Literal("write")
  }),
  input: Schema.Unknown,
  destination_url: Schema.String,
  agent_revision_id: Schema.String,
  status: ApprovalStatus,
  reason: Schema.NullOr(Schema.String),
  decided_by: Schema.NullOr(UserRef),
  created_at: Rows.Time,
  expires_at: Rows.Time,
  decided_at: Rows.TimeOrNull
})
export type ApprovalRow = typeof ApprovalRow.Type

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

export type NewApproval = Omit<ApprovalRow, "status" | "reason" | "decided_by" | "decided_at">

export class ApprovalsRepo extends Effect.Service<ApprovalsRepo>()("ApprovalsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* WebhooksRepo

    const approvalFor = (runId: string, toolCallId: string) =>
      sql`SELECT * FROM approvals WHERE run_id = ${runId} AND tool_call_id = ${toolCallId}`.pipe(Rows.maybe(ApprovalRow))

    const approval = (tenantId: string, environment: string, id: string) =>
      sql`SELECT * FROM approvals WHERE id = ${id} AND tenant_id = ${tenantId} AND environment = ${environment}`
        .pipe(Rows.maybe(ApprovalRow))

    const insertApproval = (a: NewApproval) =>
      sql`INSERT INTO approvals (id, tenant_id, environment, run_id, tool_call_id, tool_id, operation, input,
                                 destination_url, agent_revision_id, status, created_at, expires_at)
          VALUES (${a.id}, ${a.tenant_id}, ${a.environment}, ${a.run_id}, ${a.tool_call_id}, ${a.tool_id},
                  ${JSON.stringify(a.operation)}::jsonb, ${JSON.stringify(a.input)}::jsonb, ${a.destination_url},
                  ${a.agent_revision_id}, 'pending', ${a.created_at}, ${a.expires_at})`.pipe(Rows.none)

    /** Announces each approval that expired (D18 `approval.expired`, the approval as `data`). */
    const announceExpired = (expired: ReadonlyArray<ApprovalRow>, at: Date) =>
      Effect.forEach(expired, (a) =>
        Effect.flatMap(makeId("evt"), (eventId) =>
          webhooks.enqueue({
            cell: { tenantId: a.tenant_id, environment: a.environment },
            type: "approval.expired",
            eventId,
            at,
            data: toApproval(a)
          })), { discard: true })

    /**
     * The one write of an approval's status: the approval `id` (or the pending approval of a run)
     * takes the status `event` leads to, if it is still in a status the event may leave from.
     */
    const transition = (
      target: { readonly id: string } | { readonly runId: string },
      event: ApprovalEvent,
      at: Date,
      decision: { readonly by?: { type: "user"; id: string }; readonly reason?: string | null } = {}
    ) => {
      const { from, to } = approvalTransition(event)
      return sql`
        UPDATE approvals SET status = ${to}, decided_at = ${at},
          reason = ${decision.reason === undefined ? sql`reason` : decision.reason},
          decided_by = ${decision.by === undefined ? sql`decided_by` : sql`${JSON.stringify(decision.by)}::jsonb`}
        WHERE ${"id" in target ? sql`id = ${target.id}` : sql`run_id = ${target.runId}`} AND status IN ${sql.in([...from])}
        RETURNING *`.pipe(
        Rows.all(ApprovalRow),
        Effect.flatMap((changed) => (to === "expired" ? announceExpired(changed, at) : Effect.void))
      )
    }

    /** The run's pending approval, if any. */
    const pendingOf = (runId: string) =>
      sql`SELECT * FROM approvals WHERE run_id = ${runId} AND status = 'pending' ORDER BY created_at LIMIT 1`
        .pipe(Rows.maybe(ApprovalRow))

    const listApprovals = (
      tenantId: string,
      environment: string,
      after: string | undefined,
      limit: number,
      filter: { status?: string | undefined; run_id?: string | undefined }
    ) =>
      sql`SELECT * FROM approvals WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${filter.status === undefined ? sql`` : sql`AND status = ${filter.status}`}
          ${filter.run_id === undefined ? sql`` : sql`AND run_id = ${filter.run_id}`}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ApprovalRow))

    return { approvalFor, approval, insertApproval, transition, pendingOf, listApprovals } as const
  }),
  dependencies: [WebhooksRepo.Default]
}) {}
