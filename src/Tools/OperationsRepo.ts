/**
 * Dispatched writes (`tool_operations`) in Postgres. The run actor writes them inside the run's
 * commit (RunStore.commitAll `also`), so a write's record, its run's status and its events change
 * together. Status changes go through one write, `transition`, guarded by the domain's table.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { ToolCallOfRun } from "../Domain/Runs.js"
import { type OperationEvent, OperationStatus, operationTransition } from "../Domain/Tools.js"

export const OperationRow = Schema.Struct({
  ...ToolCallOfRun,
  status: OperationStatus,
  output: Schema.Unknown,
  attempts: Schema.Number,
  next_reconcile_at: Rows.TimeOrNull,
  /** the dispatch's commit: its invocation token's `iat` (Signing.InvocationClaims.issuedAt) */
  created_at: Rows.Time
})
export type OperationRow = typeof OperationRow.Type

const COLUMNS = "id, tenant_id, environment, run_id, tool_call_id, tool_id, status, output, attempts, next_reconcile_at, created_at"

export class OperationsRepo extends Effect.Service<OperationsRepo>()("OperationsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(COLUMNS)

    const operationFor = (runId: string, toolCallId: string) =>
      sql`SELECT ${columns} FROM tool_operations WHERE run_id = ${runId} AND tool_call_id = ${toolCallId}`
        .pipe(Rows.maybe(OperationRow))

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
                  ${o.approval_id}, 'dispatched', 1, ${o.at})`.pipe(Rows.none)

    /**
     * The one write of a dispatched write's status: it takes the status `event` leads to, if it is
     * in a status the event may leave from. A settled write records its output or error and when;
     * an unknown one when to reconcile it next.
     */
    const transition = (
      id: string,
      event: OperationEvent,
      at: Date,
      detail: { readonly output?: unknown; readonly error?: unknown; readonly nextReconcileAt?: Date } = {}
    ) => {
      const { from, settled, to } = operationTransition(event)
      return sql`
        UPDATE tool_operations SET status = ${to},
          ${event._tag === "Postpone" ? sql`attempts = attempts + 1,` : sql``}
          output = ${detail.output === undefined ? null : JSON.stringify(detail.output)}::jsonb,
          error = ${detail.error === undefined ? null : JSON.stringify(detail.error)}::jsonb,
          next_reconcile_at = ${detail.nextReconcileAt ?? null},
          completed_at = ${settled ? at : null}
        WHERE id = ${id} AND status IN ${sql.in([...from])}`.pipe(Rows.none)
    }

    /** A dispatched or unknown write of the run: its outcome is not known. */
    const unsettled = (runId: string) =>
      sql`SELECT ${columns} FROM tool_operations WHERE run_id = ${runId} AND status IN ('dispatched', 'unknown')`
        .pipe(Rows.maybe(OperationRow))

    /** Writes left `unknown` whose next reconciliation is due. */
    const dueForReconciliation = (at: Date, limit: number) =>
      sql`SELECT ${columns} FROM tool_operations WHERE status = 'unknown' AND next_reconcile_at <= ${at}
          ORDER BY next_reconcile_at LIMIT ${limit}`.pipe(Rows.all(OperationRow))

    return { operationFor, insertOperation, transition, unsettled, dueForReconciliation } as const
  })
}) {}
