/**
 * The write contract (4.1.2) on the customer's own Postgres: the operation id is inserted, the
 * write performed and its outcome stored in ONE transaction. A repeated operation id returns the
 * stored outcome without running the write again; success is only returned after commit.
 *
 * Concurrency: every attempt first takes a transaction-scoped advisory lock on the operation id,
 * so a concurrent duplicate waits for the first attempt's commit (or rollback) and then reads the
 * committed outcome. The primary key on `operation_id` is the second guard. The same lock lets
 * reconciliation tell "in flight" (`pending`) from "never seen" (`not_found`).
 *
 * Outputs are stored as JSON text (`json`, not `jsonb`, so a replay has the same key order and is
 * byte-identical): a write's output must survive `JSON.stringify` / `JSON.parse` unchanged (plain
 * objects, arrays, strings, numbers, booleans, null).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

/**
 * A business failure of a tool (order not found, amount too large...). A write failing with it is
 * stored as `failed`, so every retry of the operation id answers the same failure.
 */
export class ToolFailure extends Schema.TaggedError<ToolFailure>()("ToolFailure", {
  code: Schema.String,
  message: Schema.String,
  /** HTTP status to answer with (default 422). */
  status: Schema.optionalWith(Schema.Number, { default: () => 422 })
}) {}

/** The operation id was first used for another tool: its outcome is not this call's. */
export class OperationConflict extends Schema.TaggedError<OperationConflict>()("OperationConflict", {
  operationId: Schema.String,
  message: Schema.String
}) {}

export type ReconciliationStatus = "succeeded" | "failed" | "pending" | "not_found"

/** The reconciliation answer: `{operation_id, status, output?, error?}`. */
export interface Reconciliation {
  readonly operation_id: string
  readonly status: ReconciliationStatus
  readonly output?: unknown
  readonly error?: { readonly code: string; readonly message: string }
}

/** Creates the `tool_operations` table (idempotent; run it at start or from your migrations). */
export const ensureSchema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE IF NOT EXISTS tool_operations (
      operation_id text PRIMARY KEY,
      tool text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
      output json,
      error json,
      created_at timestamptz NOT NULL DEFAULT now(),
      completed_at timestamptz
    )`
}).pipe(Effect.withSpan("ToolServer.ensureSchema"))

interface Row {
  readonly tool: string
  readonly status: "pending" | "succeeded" | "failed"
  readonly output: unknown
  readonly error: { code: string; message: string; status?: number } | null
}

const lockKey = (sql: SqlClient.SqlClient, operationId: string) => sql`hashtextextended(${operationId}, 0)`

const readRow = (sql: SqlClient.SqlClient, operationId: string) =>
  Effect.map(
    sql<Row>`SELECT tool, status, output, error FROM tool_operations WHERE operation_id = ${operationId}`,
    (rows) => rows[0]
  )

/**
 * Runs `write` at most once per operation id and returns its outcome, now or as stored.
 * `write` runs inside the transaction (use the same `SqlClient`); a `ToolFailure` rolls its
 * changes back to a savepoint and is stored as the outcome. A defect or database error rolls back
 * everything, nothing is stored, and a retry with the same id runs the write again.
 */
export const runWrite = <A, R>(
  operationId: string,
  tool: string,
  write: Effect.Effect<A, ToolFailure, R>
): Effect.Effect<A, ToolFailure | OperationConflict, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outcome = yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`SELECT pg_advisory_xact_lock(${lockKey(sql, operationId)})`
      const inserted = yield* sql`
        INSERT INTO tool_operations (operation_id, tool, status) VALUES (${operationId}, ${tool}, 'pending')
        ON CONFLICT (operation_id) DO NOTHING RETURNING operation_id`
      if (inserted.length === 0) {
        const row = yield* readRow(sql, operationId)
        if (row === undefined) return yield* Effect.dieMessage(`tool_operations row ${operationId} vanished`)
        return { row, fresh: false }
      }
      // nested: a savepoint, rolled back when the write fails
      const result = yield* sql.withTransaction(write).pipe(Effect.catchTag("SqlError", Effect.die), Effect.either)
      const row: Row = result._tag === "Right"
        ? { tool, status: "succeeded", output: result.right ?? null, error: null }
        : {
          tool,
          status: "failed",
          output: null,
          error: { code: result.left.code, message: result.left.message, status: result.left.status }
        }
      yield* sql`
        UPDATE tool_operations
        SET status = ${row.status},
            output = ${row.status === "succeeded" ? JSON.stringify(row.output) : null}::json,
            error = ${row.error === null ? null : JSON.stringify(row.error)}::json,
            completed_at = now()
        WHERE operation_id = ${operationId}`
      return { row, fresh: true, value: result._tag === "Right" ? result.right : undefined }
    })).pipe(Effect.catchTag("SqlError", Effect.die))

    // committed: only now is the outcome reported
    const { row } = outcome
    if (row.tool !== tool) {
      return yield* new OperationConflict({ operationId, message: `operation id already used for ${row.tool}` })
    }
    if (row.status === "failed" && row.error !== null) {
      return yield* new ToolFailure({ code: row.error.code, message: row.error.message, status: row.error.status ?? 422 })
    }
    if (row.status !== "succeeded") return yield* Effect.dieMessage(`operation ${operationId} is ${row.status}`)
    return ("value" in outcome ? outcome.value : row.output) as A
  }).pipe(Effect.withSpan("ToolServer.runWrite", { attributes: { operationId, tool } }))

/**
 * The reconciliation answer for an operation id: `succeeded` (with the stored output), `failed`,
 * `pending` (an attempt holding it is still in flight) or `not_found`.
 */
export const reconcile = (operationId: string): Effect.Effect<Reconciliation, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(Effect.gen(function*() {
      // lock first: holding it, no attempt can commit between our look and our answer
      const [lock] = yield* sql<{ free: boolean }>`SELECT pg_try_advisory_xact_lock(${lockKey(sql, operationId)}) AS free`
      const row = yield* readRow(sql, operationId)
      if (row === undefined || row.status === "pending") {
        return { operation_id: operationId, status: lock?.free && row === undefined ? "not_found" : "pending" } as const
      }
      if (row.status === "failed") {
        return {
          operation_id: operationId,
          status: "failed",
          ...(row.error ? { error: { code: row.error.code, message: row.error.message } } : {})
        } as const
      }
      return { operation_id: operationId, status: "succeeded", output: row.output } as const
    }))
  }).pipe(Effect.catchTag("SqlError", Effect.die), Effect.withSpan("ToolServer.reconcile", { attributes: { operationId } }))
