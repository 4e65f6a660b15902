/**
 * The run store in Postgres (the tag and its contract: src/Runs/RunStore.ts): its strategy, which
 * composes the statements (src/Runs/Statements.ts) and this process's caches
 * (src/Runs/RunCaches.ts). Admission is one statement. A commit is one statement too: when the run
 * actor knows the run as this process last wrote it, the statement itself checks that version and
 * the cell's generation under the run's lock (its own transaction, no read first); otherwise (a
 * cancel request, an actor after a read, a version that moved) the run's row is locked and read
 * first (`FOR UPDATE`), so the run actor and a cancel request are serialised either way. A run that
 * ended or was admitted here is taken by its waiter or its actor from the caches rather than read,
 * and so is what an admission in a request read for the run's first dispatch with its last statement.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Clock, Deferred, Effect, Either, Layer, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { GroupCommit } from "../Database/GroupCommit.js"
import { exhausted, type QuotaLimits, RUN_QUOTAS } from "../Domain/Quotas.js"
import * as RunState from "../Domain/RunState.js"
import { makeId } from "../Kernel/Ids.js"
import { UnitOfWork } from "../Kernel/UnitOfWork.js"
import { recordRunCommit } from "../Observability/Metrics.js"
import { countAdmission, usedNow } from "../Quotas/Queries.js"
import { admittedRow, applied, plan } from "./Commit.js"
import { firstDispatchQuery } from "./Queries.js"
import { makeRunCaches } from "./RunCaches.js"
import { type Admission, type Commit, type ConversationRow, type EventRow, type RunRow, RunStore, type RunStoreShape } from "./RunStore.js"
import * as Statements from "./Statements.js"

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // the bookkeeping of a commit made in a request's transaction (admission, a cancel) waits for its commit
  const { afterCommit, readWithCommit, withCommit } = yield* UnitOfWork
  const contextBytes = (yield* AppConfig).runs.contextBytes
  const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
  const caches = makeRunCaches()
  const group = yield* Effect.serviceOption(GroupCommit)

  /**
   * A statement that is its own transaction (an actor's guarded commit), committed with the others
   * of this task of the event loop (Database/GroupCommit.ts); in a transaction, or without the
   * group commit (a store of a test's own), as it is.
   */
  const grouped = <A extends object>(statement: Statement.Statement<A>, cell: string) =>
    Option.isNone(group)
      ? statement
      : Effect.flatMap(
        Effect.serviceOption(SqlClient.TransactionConnection),
        (transaction) => Option.isSome(transaction) ? statement : group.value.send(statement, cell)
      )

  const run = (id: string) => Statements.run(sql, id)

  const ended = (id: string) =>
    Effect.suspend(() => {
      const row = caches.takeEnded(id)
      if (row !== undefined) return Effect.succeed(Option.some(row))
      const pending = caches.endingOf(id)
      if (pending === undefined) return run(id)
      return Effect.flatMap(Deferred.await(pending), (row) => {
        if (row === undefined) return run(id)
        caches.takeEnded(id)
        return Effect.succeed(Option.some(row))
      })
    })

  const starting = (id: string) =>
    Effect.suspend(() => {
      const admitted = caches.takeAdmitted(id)
      return admitted === undefined ? run(id) : Effect.succeed(Option.some(admitted))
    })

  const runOfCell = (tenantId: string, environment: string, id: string) =>
    Effect.map(run(id), Option.filter((r) => r.tenant_id === tenantId && r.environment === environment))

  /**
   * The run with its first event, then the input item (both in the request's transaction, so
   * atomic). Two statements: the run's insert waits for the transaction of a conflicting open run
   * of the conversation, which may end that run and append its last items meanwhile; the item's
   * position is read by a statement of its own, whose snapshot sees them (in the run's statement,
   * it was read from before the wait and collided with them: 500 on `conversation_items_pkey`).
   * In a request, that statement is the transaction's last (`withCommit`), with the stored response.
   */
  const admit = (row: Admission, limits: QuotaLimits) =>
    Effect.gen(function*() {
      const eventId = yield* makeId("evt")
      const cell = { tenantId: row.tenant_id, environment: row.environment }
      // The run first, then its count against the quotas: the run's insert may wait for the
      // transaction of the conversation's open run, and that run's commit takes the counters' row
      // lock (ending the run frees a place): taking it before the wait could deadlock.
      const { admitted, agent_revision_id, counted, workspace_id } = yield* Statements.admission(
        sql,
        row,
        eventId,
        countAdmission(sql, cell, limits, row.created_at, sql`run`)
      )
      if (workspace_id === null || agent_revision_id === null) return { _tag: "ConversationNotFound" } as const
      const conversation = { workspace_id, agent_revision_id }
      if (admitted !== 1) return { _tag: "ConversationBusy" } as const
      if (counted !== 1) {
        const used = yield* usedNow(sql, cell, row.created_at)
        return { _tag: "OverQuota", quota: exhausted(RUN_QUOTAS, limits, used) ?? "concurrent_runs" } as const
      }
      // In a request, with its transaction's last statement (its stored response and audit entry):
      // a statement of its own all the same, after the run's, and one round trip less.
      const input = Statements.appendInput(sql, row)
      if (!(yield* withCommit(input))) yield* input
      // The run's first dispatch reads (its key, revision and window) ride that statement too, for
      // its actor if it starts here (issue 37: a statement less per run; DispatchReads).
      const readAt = performance.now()
      const firstRead = yield* readWithCommit(firstDispatchQuery(
        sql,
        { ...row, agent_revision_id: conversation.agent_revision_id },
        contextBytes,
        row.created_at,
        { item: row.item }
      ))
      // Counted and kept once the request's transaction committed (admission runs inside it).
      yield* afterCommit(Effect.zipRight(
        recordRunCommit("none", [{ type: "run.queued", data: { status: "queued" } }]),
        Effect.sync(() => {
          const admitted = admittedRow(row, eventId, conversation)
          caches.keep(admitted)
          caches.keepAdmitted(admitted)
          const read = firstRead?.()
          if (read !== undefined) caches.keepFirstRead(row.id, { row: read, readAt })
        })
      ))
      return { _tag: "Admitted", eventId, conversation } as const
    })

  /**
   * The run's row for a commit of the run actor of cell generation `fence`, locked
   * (`Statements.lockFenced`). Another generation: the fiber is interrupted, nothing written.
   */
  const fenced = (runId: string, fence: number) =>
    Effect.gen(function*() {
      const row = yield* Statements.lockFenced(sql, runId)
      if (row !== undefined && row.fence_generation !== fence) {
        yield* Effect.logWarning(
          `a commit of cell generation ${fence} was fenced off: the cell is at generation ${row.fence_generation} (restored elsewhere)`
        ).pipe(Effect.annotateLogs({ run_id: runId }))
        return yield* Effect.interrupt
      }
      if (row === undefined) return undefined
      const { fence_generation: _, ...locked } = row
      return locked
    })

  type Committed = Either.Either<
    {
      readonly status: RunState.RunStatus
      readonly from: RunState.RunStatus
      readonly events: ReadonlyArray<EventRow>
      readonly row: RunRow
      /** the ended run's row is already kept for its waiters */
      readonly endedKept?: boolean
    },
    RunState.TransitionRefused
  >

  /**
   * The commit of an actor that knows the run as it last wrote it (`known`): planned from that
   * row, written by one statement (its own transaction) guarded by the run's version and the
   * cell's generation. Undefined when the guard does not hold (someone else wrote the run, the cell
   * moved): the caller commits under the run's lock instead, which reads the truth.
   */
  const guarded = (known: Statements.Locked, commits: ReadonlyArray<Commit<unknown>>, fence: number) =>
    Effect.gen(function*() {
      const at = yield* now
      const planned = plan(known, commits, at)
      if (Either.isLeft(planned)) return undefined
      const p = planned.right
      const rows = yield* Statements.rowsOf(known, p, at)
      const row = applied(known, p, rows.events.at(-1)?.id ?? null)
      const ends = RunState.isTerminal(p.status) && !RunState.isTerminal(known.status)
      const ending = ends ? caches.beginEnding(known.id) : undefined
      const statement = Statements.write(sql, Statements.knownGuard(sql, known, fence), known, p, rows, at)
      const updated = yield* grouped(statement, `${known.tenant_id}/${known.environment}`).pipe(
        Effect.map((ids) => ids.length),
        Effect.tap((n) => (n === 1 && ends ? Effect.sync(() => caches.keepEnded(row)) : Effect.void)),
        Effect.ensuring(ending === undefined ? Effect.void : Effect.suspend(ending.settle))
      )
      if (updated !== 1) return undefined
      const committed: Committed = Either.right({ status: p.status, from: known.status, events: rows.events, row, endedKept: ends })
      return committed
    })

  /** The commit under the run's lock (fenced by the cell's generation when `fence` is given). */
  const lockedCommit = <E>(runId: string, commits: ReadonlyArray<Commit<E>>, fence?: number) =>
    sql.withTransaction(Effect.gen(function*() {
      const locked = fence === undefined ? yield* Statements.lockRun(sql, runId) : yield* fenced(runId, fence)
      if (!locked) return Either.left(new RunState.TransitionRefused({ status: "queued", trigger: commits[0]!.trigger._tag }))
      const at = yield* now
      const planned = plan(locked, commits, at)
      if (Either.isLeft(planned)) return Either.left(planned.left)
      const p = planned.right
      const rows = yield* Statements.rowsOf(locked, p, at)
      yield* Statements.write(sql, Statements.lockedGuard(sql, runId), locked, p, rows, at)
      for (const c of commits) if (c.also !== undefined) yield* c.also
      const committed: Committed = Either.right({
        status: p.status,
        from: locked.status,
        events: rows.events,
        row: applied(locked, p, rows.events.at(-1)?.id ?? null)
      })
      return committed
    }))

  const commitAll = <E = never>(runId: string, commits: ReadonlyArray<Commit<E>>, fence?: number) =>
    Effect.suspend(() => {
      const known = fence === undefined || commits.some((c) => c.also !== undefined) ? undefined : caches.known(runId)
      if (known === undefined) return lockedCommit(runId, commits, fence)
      return Effect.flatMap(guarded(known, commits, fence!), (committed) => {
        if (committed !== undefined) return Effect.succeed(committed)
        caches.forget(runId)
        return lockedCommit(runId, commits, fence)
      })
    }).pipe(
      // Counted and kept once committed: now, or after the enclosing request's transaction (a cancel).
      Effect.tap((committed) =>
        Either.isRight(committed)
          ? afterCommit(Effect.zipRight(
            recordRunCommit(committed.right.from, committed.right.events),
            Effect.sync(() => {
              caches.keep(committed.right.row)
              const ends = RunState.isTerminal(committed.right.status) && !RunState.isTerminal(committed.right.from)
              if (ends && committed.right.endedKept !== true) {
                caches.keepEnded(committed.right.row)
              }
            })
          ))
          : Effect.void
      )
    )

  return {
    conversation: (tenantId, environment, id) => Statements.conversation(sql, tenantId, environment, id),
    insertConversation: (row: Omit<ConversationRow, "created_at"> & { readonly created_by_key_id: string }) =>
      Effect.flatMap(now, (at) => Statements.insertConversation(sql, row, at)),
    run,
    starting,
    takeFirstRead: caches.takeFirstRead,
    ended,
    runOfCell,
    admit,
    commitAll,
    items: (conversationId, budgetBytes) => Statements.items(sql, conversationId, budgetBytes),
    eventPosition: (eventId) => Statements.eventPosition(sql, eventId),
    eventsAfter: (runId, afterSequence, limit) => Statements.eventsAfter(sql, runId, afterSequence, limit),
    openRuns: Statements.openRuns(sql),
    openRunsOf: (tenantId, environment) => Statements.openRunsOf(sql, tenantId, environment)
  } satisfies RunStoreShape
})

/** The run store in Postgres. */
export const RunStoreSql: Layer.Layer<RunStore, never, SqlClient.SqlClient | UnitOfWork | AppConfig> = Layer.effect(RunStore, make)
