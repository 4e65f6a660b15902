/**
 * Dispatched writes (`tool_operations`) in Postgres. The run actor writes them inside the run's
 * commit (RunStore.commitAll `also`), so a write's record, its run's status and its events change
 * together.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export interface OperationRow {
  readonly id: string
  readonly run_id: string
  readonly tool_call_id: string
  readonly tool_id: string
  readonly status: "dispatched" | "succeeded" | "failed" | "not_found" | "unknown"
  readonly output: unknown
  readonly attempts: number
  readonly next_reconcile_at: Date | null
}

export class OperationsRepo extends Effect.Service<OperationsRepo>()("OperationsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const operationFor = (runId: string, toolCallId: string) =>
      Effect.map(
        sql<OperationRow>`SELECT * FROM tool_operations WHERE run_id = ${runId} AND tool_call_id = ${toolCallId}`,
        (rows) => rows[0]
      )

    const insertOperation = (o: {
      id: string
      tenant_id: string
      environment: string
      run_id: string
      tool_call_id: string
      tool_id: string
      approval_id: string | null
      at: Date
    }) =>
      sql`INSERT INTO tool_operations (id, tenant_id, environment, run_id, tool_call_id, tool_id, approval_id, status,
                                       attempts, created_at)
          VALUES (${o.id}, ${o.tenant_id}, ${o.environment}, ${o.run_id}, ${o.tool_call_id}, ${o.tool_id},
                  ${o.approval_id}, 'dispatched', 1, ${o.at})`

    const settleOperation = (
      id: string,
      status: OperationRow["status"],
      at: Date,
      detail: { output?: unknown; error?: unknown; nextReconcileAt?: Date | null }
    ) =>
      sql`UPDATE tool_operations SET status = ${status},
            output = ${detail.output === undefined ? null : JSON.stringify(detail.output)}::jsonb,
            error = ${detail.error === undefined ? null : JSON.stringify(detail.error)}::jsonb,
            next_reconcile_at = ${detail.nextReconcileAt ?? null},
            completed_at = ${status === "unknown" || status === "dispatched" ? null : at}
          WHERE id = ${id}`

    /** A dispatched or unknown write of the run: its outcome is not known. */
    const unsettled = (runId: string) =>
      Effect.map(
        sql<OperationRow>`SELECT * FROM tool_operations WHERE run_id = ${runId} AND status IN ('dispatched', 'unknown')`,
        (rows) => rows[0]
      )

    /** Writes left `unknown` whose next reconciliation is due. */
    const dueForReconciliation = (at: Date, limit: number) =>
      sql<OperationRow & { tenant_id: string; environment: string }>`
        SELECT * FROM tool_operations WHERE status = 'unknown' AND next_reconcile_at <= ${at}
        ORDER BY next_reconcile_at LIMIT ${limit}`

    const postpone = (id: string, next: Date) =>
      sql`UPDATE tool_operations SET attempts = attempts + 1, next_reconcile_at = ${next} WHERE id = ${id}`

    return {
      operationFor,
      insertOperation,
      settleOperation,
      unsettled,
      dueForReconciliation,
      postpone
    } as const
  })
}) {}
