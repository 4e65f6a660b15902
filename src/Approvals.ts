/**
 * Human approvals of writes (D9, contract 3.1 rules 4-6): list, read, decide. A decision needs a
 * user (`X-Actor-Token`); it is taken under the run's row lock, with the run's transition, so an
 * approval that expired (or a run cancelled) meanwhile cannot also be approved. Approve: the run
 * resumes and its actor calls the write once. Deny: the agent gets a denied tool result and the
 * run continues (D7). The time spent waiting does not count against the active-execution budget;
 * the run's total authorization still does (a fresh actor token does not extend it).
 */
import { Clock, Effect, Either } from "effect"

import { ActorSessions } from "./ActorSessions.js"
import { ApprovalsRepo, toApproval } from "./Approvals/Repo.js"
import { Cells, tellVia } from "./Cells/Cells.js"
import { StartRun } from "./Cells/Protocol.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { Trigger } from "./Domain/RunState.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, notFound } from "./Kernel/Errors.js"
import type { Gated } from "./Kernel/Policy.js"
import type { Principal } from "./Kernel/Principal.js"
import { afterCommit } from "./Kernel/UnitOfWork.js"
import { type Commit, RunStore } from "./Runs.js"

export class Approvals extends Effect.Service<Approvals>()("Approvals", {
  effect: Effect.gen(function*() {
    const repo = yield* ApprovalsRepo
    const runs = yield* RunStore
    const actors = yield* ActorSessions
    const cells = yield* Cells

    const approvalRow = (p: Principal, id: string) =>
      Effect.flatMap(
        repo.approval(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(row) : Effect.fail(notFound("approval", "approval_id"))
      )

    const list = (p: Principal, params: Cursor.ListParams & { status?: string | undefined; run_id?: string | undefined }) =>
      Cursor.listPage(
        `approvals:${params.status ?? ""}:${params.run_id ?? ""}`,
        (t, e, after, limit) => repo.listApprovals(t, e, after, limit, params),
        toApproval
      )(p, params)

    const decide = (
      p: Principal,
      id: string,
      actorToken: string | undefined,
      body: { decision: "approve" | "deny"; reason?: string | undefined }
    ) =>
      Effect.gen(function*() {
        const actor = yield* actors.requireActor(p, actorToken)
        const approval = yield* approvalRow(p, id)
        const at = new Date(yield* Clock.currentTimeMillis)
        if (approval.status !== "pending") {
          return yield* conflict("approval_not_pending", `This approval is already ${approval.status}`)
        }
        if (approval.expires_at.getTime() <= at.getTime()) {
          // Its alarm is due: let the run's actor end it now.
          yield* afterCommit(tellVia(cells, p, new StartRun({ runId: approval.run_id })))
          return yield* conflict("approval_expired", "This approval expired before the decision")
        }
        const run = yield* runs.run(approval.run_id)
        const status = body.decision === "approve" ? "approved" : "denied"
        const reason = body.reason ?? null
        const commits: Array<Commit> = [{
          trigger: Trigger.DecideApproval(),
          data: { approval_id: approval.id, tool_call_id: approval.tool_call_id, decision: status, decided_by: actor, reason },
          requiredAction: null,
          // the wait for a human does not count against active execution
          ...(run._tag === "Some" && run.value.execution_deadline_at !== null
            ? {
              executionDeadlineAt: new Date(
                at.getTime() + Math.max(0, run.value.execution_deadline_at.getTime() - approval.created_at.getTime())
              )
            }
            : {}),
          also: repo.transition({ id: approval.id }, { _tag: "Decide", decision: body.decision }, at, { by: actor, reason })
        }]
        if (status === "denied") {
          const error = { type: "denied", message: "A person denied this write", ...(reason === null ? {} : { reason }) }
          commits.push({
            trigger: Trigger.ToolCallFailed(),
            data: { tool_call_id: approval.tool_call_id, name: approval.operation.name, tool_id: approval.tool_id, error },
            items: [{
              type: "tool_result",
              call_id: approval.tool_call_id,
              name: approval.operation.name,
              output: { error },
              is_error: true
            }]
          })
        }
        const committed = yield* runs.commitAll(approval.run_id, commits)
        if (Either.isLeft(committed)) {
          return yield* conflict("approval_not_pending", "The run no longer waits for this approval")
        }
        yield* afterCommit(tellVia(cells, p, new StartRun({ runId: approval.run_id })))
        return toApproval(yield* approvalRow(p, id))
      })

    return {
      list: (p: Principal, params: Cursor.ListParams & { status?: string | undefined; run_id?: string | undefined }) =>
        dieOnSqlError(list(p, params)),
      get: (p: Principal, id: string) => dieOnSqlError(Effect.map(approvalRow(p, id), toApproval)),
      decide: (
        p: Gated<Principal>,
        id: string,
        token: string | undefined,
        body: { decision: "approve" | "deny"; reason?: string | undefined }
      ) => dieOnSqlError(decide(p, id, token, body))
    } as const
  }),
  dependencies: [ApprovalsRepo.Default, ActorSessions.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Approvals (scripts/layers.ts) ----
export { ApprovalsRepo } from "./Approvals/Repo.js"
