/**
 * Statements that are each a transaction of their own (the run actors' commits), sent together
 * (issue 37): those sent in one task of the event loop (a run of the node's scheduler: the fibers
 * it resumed in that task) go to Postgres, once the task is done (a microtask), in one message
 * sequence up to one `Sync`, which Postgres runs as one implicit transaction and answers once: one round trip,
 * one write to the socket and one commit (one WAL flush) for all of them, instead of one each.
 *
 * - A group commits whole or not at all: when one of its statements fails, Postgres skips the
 *   rest and rolls the group back, and each of its statements is then sent again on its own (the
 *   one that failed fails alone; the others commit as they would have).
 * - Statements are ordered by `order` (the run's cell) within a group, so concurrent groups take
 *   their cells' rows (quota counters) in one order and never wait on each other in a cycle.
 * - A statement whose caller is interrupted before its group is sent is not sent; once sent, it
 *   commits or not with its group and its caller no longer waits for it.
 * - A statement's rows are `pg`'s, as `@effect/sql-pg` gives them (no transforms here).
 *
 * A statement is sent as `pg`'s `Query` would send it alone (prepared under its connection's name
 * for its text, see Prepared.ts), but for the `Sync` that ends the group; answers are handed to
 * each statement's `Query` in order, each `CommandComplete` ending one.
 */
import type { Statement } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect } from "effect"

import { Query, type Wire } from "./PgQuery.js"

/** One statement of a group: `pg`'s `Query`, whose messages end with its `Execute` (the group sends the `Sync`). */
class Member extends Query {
  /** Whether this statement's `Parse` was sent in its group (its name is not the connection's yet). */
  parsedHere = false

  override prepare(connection: Wire) {
    this.parsedHere = this.name !== undefined && !this.hasBeenParsed(connection)
    super.prepare(connection)
  }

  override _getRows(connection: Wire, rows: number | undefined) {
    if (rows) return super._getRows(connection, rows)
    connection.execute({ portal: this.portal })
  }
}

/**
 * The group, as `pg`'s client sees one query: it writes every member's messages and one `Sync`,
 * and hands each answer to the member being answered (`CommandComplete` moves to the next). The
 * client records a parsed statement under the active query's `name` and `text`: the member's.
 */
class Group {
  private at = 0
  private failed: Error | undefined

  constructor(private readonly members: ReadonlyArray<Member>, private readonly done: (failed: Error | undefined) => void) {}

  get name() {
    return this.members[this.at]?.name
  }
  get text() {
    return this.members[this.at]?.text
  }

  submit(connection: Wire) {
    connection.stream.cork()
    try {
      for (const member of this.members) member.prepare(connection)
      connection.sync()
    } finally {
      connection.stream.uncork()
    }
    return null
  }

  handleRowDescription(message: unknown) {
    this.members[this.at]?.handleRowDescription(message)
  }
  handleDataRow(message: unknown) {
    this.members[this.at]?.handleDataRow(message)
  }
  handleCommandComplete(message: unknown, connection: Wire) {
    this.members[this.at]?.handleCommandComplete(message, connection)
    this.at++
  }
  handleEmptyQuery(connection: Wire) {
    this.members[this.at]?.handleEmptyQuery(connection)
    this.at++
  }
  handleError(error: Error, connection: Wire) {
    if (this.failed !== undefined) return
    this.failed = error
    // the statements after the failed one were skipped: their parses too (the client forgets the failed one's)
    for (const member of this.members.slice(this.at + 1)) {
      if (member.parsedHere && member.name !== undefined) delete connection.submittedNamedStatements[member.name]
    }
    // the client answers an error at once, not at ReadyForQuery
    this.done(error)
  }
  handleReadyForQuery(connection: Wire) {
    if (this.failed !== undefined) return
    for (const member of this.members) member.handleReadyForQuery(connection)
    this.done(undefined)
  }
  handlePortalSuspended() {}
  handleCopyInResponse() {}
  handleCopyData() {}
}

/** What is used here of `pg`'s pool: a connection lent, and how it goes back. */
export interface GroupPool {
  connect(
    callback: (
      error: Error | undefined,
      client: { query(q: unknown, values?: unknown, callback?: unknown): unknown } | undefined,
      release: (error?: Error | boolean) => void
    ) => void
  ): void
}

interface Pending {
  readonly text: string
  readonly values: ReadonlyArray<unknown>
  readonly order: string
  readonly answer: (error: Error | null, rows?: ReadonlyArray<unknown>) => void
  cancelled: boolean
}

export class GroupCommit extends Context.Tag("GroupCommit")<GroupCommit, {
  /**
   * `statement`, a transaction of its own, committed with the others sent in this task of the
   * event loop (see the module comment); `order`: where it goes in its group (its cell).
   */
  readonly send: <A extends object>(statement: Statement.Statement<A>, order: string) => Effect.Effect<ReadonlyArray<A>, SqlError>
}>() {}

const failure = (cause: unknown) => new SqlError({ cause, message: "Failed to execute statement" })

/** The group commit of `pool`'s connections, statements named by `nameOf` (the connection's). */
export const makeGroupCommit = (pool: GroupPool, nameOf: (client: object, text: string) => string | undefined) => {
  let pending: Array<Pending> = []
  let scheduled = false

  /** Sends `batch` on one connection: alone as `pg` would, or as a group; a failed group's statements again, each alone. */
  const sendBatch = (batch: ReadonlyArray<Pending>) =>
    pool.connect((error, client, release) => {
      if (error !== undefined && error !== null || client === undefined) {
        for (const p of batch) p.answer(error ?? new Error("no connection"))
        return
      }
      if (batch.length === 1) {
        const p = batch[0]!
        return client.query(p.text, p.values, (e: Error | null, result?: { rows: ReadonlyArray<unknown> }) => {
          release(e !== null && e !== undefined && isConnectionError(e) ? e : undefined)
          p.answer(e ?? null, result?.rows)
        })
      }
      const members = batch.map((p) =>
        new Member({
          name: nameOf(client, p.text),
          text: p.text,
          values: p.values,
          // called once its group succeeded (with an error only if its rows could not be read)
          callback: (e, result) => p.answer(e ?? null, result?.rows)
        })
      )
      client.query(
        new Group(members, (failed) => {
          if (failed === undefined) return release()
          if (isConnectionError(failed)) {
            release(failed)
            for (const p of batch) p.answer(failed)
            return
          }
          // rolled back whole: each again alone, once the connection is ready for it
          release()
          for (const p of batch) sendBatch([p])
        })
      )
    })

  const flush = () => {
    scheduled = false
    const batch = pending.filter((p) => !p.cancelled)
    pending = []
    if (batch.length === 0) return
    batch.sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0))
    sendBatch(batch)
  }

  const send = <A extends object>(statement: Statement.Statement<A>, order: string) =>
    Effect.async<ReadonlyArray<A>, SqlError>((resume) => {
      const [text, values] = statement.compile()
      const p: Pending = {
        text,
        values,
        order,
        cancelled: false,
        answer: (error, rows) => resume(error === null ? Effect.succeed((rows ?? []) as ReadonlyArray<A>) : Effect.fail(failure(error)))
      }
      pending.push(p)
      if (!scheduled) {
        scheduled = true
        queueMicrotask(flush)
      }
      return Effect.sync(() => {
        p.cancelled = true
      })
    })

  return GroupCommit.of({ send })
}

/** An error of the connection itself (not a statement's): the connection is not given back for reuse. */
const isConnectionError = (error: Error) => !("severity" in error)
