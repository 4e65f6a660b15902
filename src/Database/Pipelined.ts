/**
 * A transaction's `BEGIN` and `COMMIT` travel with its first and last statements (issue 37).
 *
 * `@effect/sql` opens a transaction with `BEGIN` and ends it with `COMMIT`, each a round trip of
 * its own that the process waits for: a mutation of three statements was five round trips. On a
 * connection of the pool, this sends them with their neighbours instead, in the extended
 * protocol's one message sequence up to its `Sync` (Postgres runs them in order, as if sent one by
 * one, and answers once):
 *
 * - `BEGIN` is answered at once and sent with the transaction's first parameterised statement
 *   (`BEGIN` then the statement); one without parameters (the simple protocol, which may hold
 *   several statements) has it sent on its own first, as before; a transaction that sends nothing
 *   sends neither its `BEGIN` nor its `COMMIT` or `ROLLBACK`.
 * - `commitsWith(effect)`: the statement `effect` sends (one, the transaction's last) carries the
 *   `COMMIT`. Postgres skips what follows a failed statement up to the `Sync`, so when the
 *   statement fails nothing is committed and the transaction is rolled back as before; when the
 *   `COMMIT` itself fails, the statement reports its error. Once it committed, the transaction's
 *   own `COMMIT` is answered at once, and so is a `ROLLBACK` (work that fails after its last
 *   statement does not undo it: the caller's last statement is its point of no return), and a
 *   further statement on that transaction is refused.
 *
 * - `sendAhead({ text, values, answered })`: a statement whose answer the transaction need not wait for (a
 *   mutation's idempotency claim, which fails when the request must not run) is sent with the
 *   transaction's next statement, before it: when it fails, Postgres skips that statement too, which
 *   reports its error. `answered` hears how it went (an error also when it was never sent: the
 *   transaction ended first).
 *
 * Which messages carry what is `pg`'s `Query` with two steps added (its `prepare` and `_getRows`,
 * pg 8.23); the answers to `BEGIN` and `COMMIT` are not the statement's result. A connection's
 * state is reset when it goes back to the pool.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

import { type Callback, Query, type Wire } from "./PgQuery.js"
import type { QueryingClient } from "./Prepared.js"

/** A statement sent ahead of the transaction's next one (its text's parameters given as text). */
export interface Ahead {
  readonly text: string
  readonly values: ReadonlyArray<string | null>
  /** null: it ran; else its error, or that it was never sent */
  readonly answered: (error: Error | null) => void
}

/**
 * A statement sent with `BEGIN` and statements ahead of it before it and/or `COMMIT` after it.
 * Their answers (each a parse, a bind, rows of no interest and a command tag) are not the
 * statement's; while they are read, the statement's name is hidden from the client, which would
 * otherwise record it as parsed on their parse.
 */
class WithNeighbours extends Query {
  private ownName: string | undefined
  private hidden = false
  private beginAnswered = false
  private statementAnswered = false
  /** the statements ahead not answered yet, in order */
  private readonly aheadLeft: Array<Ahead>

  constructor(
    config: {
      readonly name: string | undefined
      readonly text: string
      readonly values: ReadonlyArray<unknown>
      readonly callback: Callback
    },
    private readonly begin: boolean,
    private readonly commit: boolean,
    ahead: ReadonlyArray<Ahead>
  ) {
    super(config)
    this.ownName = config.name // (the field's definition after \`super\` reset what the setter kept)
    this.aheadLeft = [...ahead]
  }

  /** `BEGIN`'s or a statement ahead's answers are being read. */
  private get neighbourAnswering() {
    return (this.begin && !this.beginAnswered) || this.aheadLeft.length > 0
  }

  // `Query`'s constructor assigns `name`: kept here, read through the accessor
  override get name() {
    return this.hidden ? undefined : this.ownName
  }
  override set name(name: string | undefined) {
    this.ownName = name
  }

  override prepare(connection: Wire) {
    if (this.begin) {
      connection.parse({ text: "BEGIN" })
      connection.bind()
      connection.execute()
    }
    for (const ahead of this.aheadLeft) {
      connection.parse({ text: ahead.text })
      connection.bind({ values: ahead.values })
      connection.execute()
    }
    super.prepare(connection)
    this.hidden = this.neighbourAnswering
  }

  override _getRows(connection: Wire, rows: number | undefined) {
    if (!this.commit || rows) return super._getRows(connection, rows)
    connection.execute({ portal: this.portal })
    connection.parse({ text: "COMMIT" })
    connection.bind()
    connection.execute()
    connection.sync()
  }

  override handleError(error: Error, connection: Wire) {
    // `BEGIN` or a statement ahead failed (the client read no name): the statement was never parsed either
    if (this.hidden && this.ownName !== undefined) delete connection.submittedNamedStatements[this.ownName]
    this.hidden = false
    for (const ahead of this.aheadLeft.splice(0)) ahead.answered(error)
    super.handleError(error, connection)
  }

  override handleDataRow(message: unknown) {
    if (this.neighbourAnswering) return // a statement ahead's
    super.handleDataRow(message)
  }

  override handleCommandComplete(message: unknown, connection: Wire) {
    if (this.begin && !this.beginAnswered) {
      this.beginAnswered = true
      this.hidden = this.neighbourAnswering
      return
    }
    const ahead = this.aheadLeft.shift()
    if (ahead !== undefined) {
      this.hidden = this.neighbourAnswering
      return ahead.answered(null)
    }
    if (this.statementAnswered) return // the COMMIT's
    this.statementAnswered = true
    super.handleCommandComplete(message, connection)
  }
}

/** A connection's transaction as sent so far. */
interface State {
  /** `BEGIN` answered, not sent yet. */
  beginPending: boolean
  /** The next statement carries the `COMMIT`. */
  commitNext: boolean
  /** A statement carried the `COMMIT` and it committed. */
  committed: boolean
  /** Statements to send before the next one (`ahead`). */
  readonly ahead: Array<Ahead>
}

const states = new WeakMap<object, State>()

const answered = (command: string) => ({ command, rowCount: null, rows: [], fields: [] })

/** Sends `client`'s `BEGIN` and `COMMIT` with its statements (see the module comment). */
export const pipelineTransactions = (client: QueryingClient, nameOf: (text: string) => string | undefined) => {
  const send = client.query.bind(client)
  const state: State = { beginPending: false, commitNext: false, committed: false, ahead: [] }
  states.set(client, state)
  /** `BEGIN` if it is pending, then the statements ahead, each on its own (their answers not awaited). */
  const sendPending = () => {
    if (state.beginPending) {
      state.beginPending = false
      ;(send("BEGIN") as Promise<unknown>).catch(() => undefined) // its statement reports a lost connection
    }
    for (const ahead of state.ahead.splice(0)) send(ahead.text, ahead.values, (error: Error | null) => ahead.answered(error ?? null))
  }
  client.query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (typeof config === "string" && typeof callback === "function") {
      const answer = callback as Callback
      if (config === "BEGIN" && !state.beginPending) {
        state.beginPending = true
        return answer(null, answered("BEGIN"))
      }
      if (config === "COMMIT" || config === "ROLLBACK") {
        // a transaction that commits what it sent ahead sends it now
        if (config === "COMMIT" && state.ahead.length > 0 && !state.committed) sendPending()
        const nothingSent = state.beginPending || state.committed
        reset(state)
        if (nothingSent) return answer(null, answered(config))
        return send(config, values, callback)
      }
      if (state.committed) {
        return answer(new Error(`a statement after its transaction's COMMIT: ${config.slice(0, 80)}`))
      }
      if ((state.beginPending || state.commitNext || state.ahead.length > 0) && Array.isArray(values) && values.length > 0) {
        const begin = state.beginPending
        const commit = state.commitNext
        const ahead = state.ahead.splice(0)
        state.beginPending = false
        state.commitNext = false
        return send(
          new WithNeighbours(
            {
              name: nameOf(config),
              text: config,
              values,
              callback: (error, result) => {
                if (commit && error === null) state.committed = true
                answer(error, result)
              }
            },
            begin,
            commit,
            ahead
          )
        )
      }
    }
    sendPending()
    return send(config, values, callback)
  }
}

const reset = (state: State) => {
  state.beginPending = false
  state.commitNext = false
  state.committed = false
  for (const ahead of state.ahead.splice(0)) ahead.answered(new Error("not sent: its transaction ended first"))
}

/** Forgets what `client`'s last transaction left (when it goes back to the pool). */
export const released = (client: object) => {
  const state = states.get(client)
  if (state !== undefined) reset(state)
}

/** The pipelined state of the calling fiber's transaction's connection, at its top level. */
const transactionState = Effect.map(Effect.serviceOption(SqlClient.TransactionConnection), (transaction) => {
  if (Option.isNone(transaction) || transaction.value[1] !== 0) return undefined
  const client = (transaction.value[0] as unknown as { readonly pg?: object }).pg
  return client === undefined ? undefined : states.get(client)
})

/**
 * Sends `ahead` with the calling fiber's transaction's next statement (see the module comment):
 * false outside a transaction or in a nested one (the caller sends it itself).
 */
export const sendAhead = (ahead: Ahead): Effect.Effect<boolean> =>
  Effect.map(transactionState, (state) => {
    if (state === undefined || state.committed) return false
    state.ahead.push(ahead)
    return true
  })

/**
 * Runs `effect`, whose one statement is its transaction's last: that statement carries the
 * `COMMIT` (see the module comment). Outside a transaction, or in a nested one, `effect` runs as it
 * is; so it does if it sends no statement (the `COMMIT` is then sent on its own).
 */
export const commitsWith = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(transactionState, (state) => {
    if (state === undefined) return effect
    state.commitNext = true
    return Effect.ensuring(effect, Effect.sync(() => (state.commitNext = false)))
  })
