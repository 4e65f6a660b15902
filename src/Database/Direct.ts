/**
 * A statement sent straight to its connection (issue 37). `yield* statement` costs @effect/sql
 * some fifty Effect instructions (the transaction's connection looked up, a span made and ended
 * even with tracing off, a scope and an acquire/use/release around the connection); this compiles
 * the statement as @effect/sql would and hands it to `pg` (through Prepared.ts and Pipelined.ts
 * like every other statement):
 *
 * - in a transaction, to the transaction's connection. Not kept: @effect/sql cancels a statement
 *   whose fiber is interrupted (`pg_cancel_backend`); a request's transaction runs detached from
 *   its client (Idempotency's `detached`), so only the service's stop interrupts it, and its
 *   statement then ends with its connection's transaction.
 * - outside one, to a connection of the node's pool (`DirectPool`, the fair pool @effect/sql-pg
 *   is given: the connection is the calling work's cell's share), given back once answered, as
 *   @effect/sql-pg does it: a connection that errs is given back with its error (the pool drops
 *   it), an interrupted statement is cancelled (best effort) and its connection given back once
 *   it ended.
 *
 * With tracing on (its `sql.execute` span kept), or without a pool, the statement runs as it is.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, FiberRef, Option } from "effect"

interface Client {
  query(text: string, values: ReadonlyArray<unknown>, callback: (error: Error | null, result?: unknown) => void): void
}

interface PoolClient extends Client {
  readonly processID?: number
  release(error?: Error): void
  once(event: "error", listener: (error: Error) => void): void
  off(event: "error", listener: (error: Error) => void): void
}

/** The node's pool as @effect/sql-pg is given it (Database/Client.ts), for statements outside a transaction. */
export class DirectPool extends Context.Tag("DirectPool")<DirectPool, {
  connect(callback: (error: Error | undefined, client: PoolClient | undefined) => void): void
  query(text: string, callback: () => void): void
}>() {}

const rowsOf = (result: unknown): ReadonlyArray<unknown> =>
  Array.isArray(result)
    ? result.map((r: { rows?: ReadonlyArray<unknown> }) => r.rows ?? [])
    : (result as { rows?: ReadonlyArray<unknown> } | undefined)?.rows ?? []

const failed = (cause: unknown, message: string) => new SqlError({ cause, message })

/** `pg`'s answer to a statement as @effect/sql-pg gives it: its rows, or its error. */
const answerOf = <A>(error: Error | null | undefined, result: unknown): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  error === null || error === undefined
    ? Effect.succeed(rowsOf(result) as ReadonlyArray<A>)
    : Effect.fail(failed(error, "Failed to execute statement"))

/** `statement`, in the calling fiber's transaction sent straight to its connection (see the module comment). */
export const execute = <A>(statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  Effect.withFiberRuntime((fiber) => {
    if (fiber.getFiberRef(FiberRef.currentTracerEnabled)) return statement
    const transaction = Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)
    if (Option.isNone(transaction)) {
      const pool = Context.getOption(fiber.currentContext, DirectPool)
      return Option.isNone(pool) ? statement : onPool(pool.value, statement)
    }
    const client = (transaction.value[0] as unknown as { readonly pg?: Client }).pg
    if (client === undefined) return statement
    const [text, values] = statement.compile()
    return Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
      client.query(text, values, (error, result) => resume(answerOf(error, result)))
    })
  })

/** `statement` on a connection of `pool`, given back once answered (see the module comment). */
const onPool = <A>(pool: DirectPool["Type"], statement: Statement.Statement<A>): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
    const [text, values] = statement.compile()
    let client: PoolClient | undefined
    let done = false
    let interrupted = false
    const giveBack = (error?: Error) => {
      if (client === undefined) return
      client.off("error", onError)
      client.release(error)
      client = undefined
    }
    function onError(error: Error) {
      if (done) return
      done = true
      giveBack(error)
      resume(Effect.fail(failed(error, "Connection error")))
    }
    pool.connect((error, acquired) => {
      if (error !== undefined && error !== null || acquired === undefined) {
        return resume(Effect.fail(failed(error ?? new Error("No client returned"), "Failed to acquire connection")))
      }
      if (interrupted) return acquired.release()
      client = acquired
      client.once("error", onError)
      client.query(text, values, (error, result) => {
        if (done) return
        done = true
        giveBack()
        if (!interrupted) resume(answerOf(error, result))
      })
    })
    return Effect.sync(() => {
      interrupted = true
      // running: cancelled (best effort), its connection given back once it ended
      if (client !== undefined && !done && client.processID !== undefined) {
        pool.query(`SELECT pg_cancel_backend(${client.processID})`, () => undefined)
      }
    })
  })
