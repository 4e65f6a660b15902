/**
 * A statement of the calling fiber's transaction sent straight to the transaction's connection
 * (issue 37). `yield* statement` in a transaction costs @effect/sql some fifty Effect instructions
 * (the transaction's connection looked up, a span made and ended even with tracing off, an
 * acquire/use/release around it); this compiles the statement as @effect/sql would and hands it to
 * the connection (`pg`'s query, through Prepared.ts and Pipelined.ts like every other statement).
 * Outside a transaction, or with tracing on (its `sql.execute` span kept), the statement runs as
 * it is.
 *
 * Not kept: @effect/sql cancels a statement whose fiber is interrupted (`pg_cancel_backend`);
 * a request's transaction runs detached from its client (Idempotency's `detached`), so only the
 * service's stop interrupts it, and its statement then ends with its connection's transaction.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, FiberRef, Option } from "effect"

interface Client {
  query(text: string, values: ReadonlyArray<unknown>, callback: (error: Error | null, result?: unknown) => void): void
}

const rowsOf = (result: unknown): ReadonlyArray<unknown> =>
  Array.isArray(result)
    ? result.map((r: { rows?: ReadonlyArray<unknown> }) => r.rows ?? [])
    : (result as { rows?: ReadonlyArray<unknown> } | undefined)?.rows ?? []

/** `statement`, in the calling fiber's transaction sent straight to its connection (see the module comment). */
export const execute = <A>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  Effect.withFiberRuntime((fiber) => {
    if (fiber.getFiberRef(FiberRef.currentTracerEnabled)) return statement
    const transaction = Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)
    const client = Option.isSome(transaction) ? (transaction.value[0] as unknown as { readonly pg?: Client }).pg : undefined
    if (client === undefined) return statement
    const [text, values] = statement.compile()
    return Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
      client.query(text, values, (error, result) =>
        resume(
          error === null || error === undefined
            ? Effect.succeed(rowsOf(result) as ReadonlyArray<A>)
            : Effect.fail(new SqlError({ cause: error, message: "Failed to execute statement" }))
        ))
    })
  })
