/**
 * The run store in Postgres (the tag and its contract: src/Runs/RunStore.ts). Admission is one
 * statement. A commit is one statement too: when the run actor knows the run as this process last
 * wrote it, the statement itself checks that version and the cell's generation under the run's
 * lock (its own transaction, no read first); otherwise (a cancel request, an actor after a read, a
 * version that moved) the run's row is locked and read first (`FOR UPDATE`), so the run actor and
 * a cancel request are serialised either way.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Clock, Deferred, Effect, Either, FiberId, Layer, Option, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { exhausted, type QuotaLimits, RUN_QUOTAS } from "../Domain/Quotas.js"
import * as RunState from "../Domain/RunState.js"
import { EnvironmentName, makeId } from "../Kernel/Ids.js"
import { UnitOfWork } from "../Kernel/UnitOfWork.js"
import { recordRunCommit } from "../Observability/Metrics.js"
import { countAdmission, usedNow } from "../Quotas/Repo.js"
import { admittedRow, applied, plan } from "./Commit.js"
import { type Locked, rowsOf, write } from "./CommitSql.js"
import { type Admission, type Commit, ConversationRow, EventRow, RunRow, RunStore, type RunStoreShape } from "./RunStore.js"

/** Row shapes decoded on hot paths, made once (a schema made per call is compiled per call). */
const AdmittedRow = Schema.Struct({
  workspace_id: Schema.NullOr(Schema.String),
  agent_revision_id: Schema.NullOr(Schema.String),
  admitted: Rows.Int8,
  counted: Rows.Int8
})
const ItemRow = Schema.Struct({ item: Schema.Unknown })
const PositionRow = Schema.Struct({ run_id: Schema.String, sequence: Schema.Number })

/** How many ended runs' rows are kept for their waiters (`ended`): a waiter takes its row within milliseconds. */
const ENDED_KEPT = 1024
/** How long after its admission a run's row is taken from it by its actor rather than read (`starting`). */
const ADMITTED_FRESH_MS = 5_000

/** How many unfinished runs' rows are kept for their actors' next commits (`commitAll`). */
const KEPT = 10_000

/** Sets `key` last in an insertion-ordered map of at most `max` entries, the oldest dropped. */
const remember = <V>(map: Map<string, V>, key: string, value: V, max: number) => {
  map.delete(key)
  map.set(key, value)
  if (map.size > max) map.delete(map.keys().next().value!)
}

const RUN_COLUMNS = `r.*, (SELECT e.id FROM run_events e WHERE e.run_id = r.id AND e.sequence = r.last_sequence) AS last_event_id`
const LockedRow = RunRow.pipe(Schema.omit("last_event_id"))
const FencedRow = Schema.extend(LockedRow, Schema.Struct({ fence_generation: Schema.Number }))

/**
 * The conversation's window (`RunStore.items`), unordered: rows of `item` and `position`. A query of
 * its own, so that the run actor's first dispatch can read it with the rest of what it needs
 * (src/Runtime/DispatchReads.ts).
 */
export const itemsQuery = (sql: SqlClient.SqlClient, conversationId: string, budgetBytes: number) =>
  sql`WITH sized AS (
        SELECT item, position, sum(pg_column_size(item)) OVER (ORDER BY position DESC) AS newer_bytes
        FROM conversation_items WHERE conversation_id = ${conversationId}
      )
      SELECT item, position FROM sized
      WHERE newer_bytes <= ${budgetBytes}
         OR position >= (SELECT COALESCE(max(position), 0) FROM conversation_items
                         WHERE conversation_id = ${conversationId} AND item->>'type' = 'user_message')`

/**
 * The admission's one statement: the run's conversation (the cell's, of `row.workspace` when
 * given), the run with its workspace and revision (none when the conversation has an unfinished
 * one), then `counting` (a CTE body reading the `run` CTE: the quota count, which returns a row when
 * the run fits), then the run's first event. Answers the conversation's `workspace_id` and
 * `agent_revision_id` (null: no such conversation), `admitted` and `counted` (0 or 1 each).
 */
export const admissionStatement = (sql: SqlClient.SqlClient, row: Admission, eventId: string, counting: Statement.Fragment) =>
  sql`
    WITH conversation AS (
      SELECT workspace_id, agent_revision_id FROM conversations
      WHERE id = ${row.conversation_id} AND tenant_id = ${row.tenant_id} AND environment = ${row.environment}
        AND (${row.workspace ?? null}::text IS NULL OR workspace_id = ${row.workspace ?? null}::text)
    ), run AS (
      INSERT INTO runs (id, tenant_id, environment, workspace_id, conversation_id, agent_revision_id, key_id, user_id,
                        status, input, last_sequence, created_at, start_deadline_at, authorization_expires_at)
      SELECT ${row.id}, ${row.tenant_id}, ${row.environment}, c.workspace_id, ${row.conversation_id},
             c.agent_revision_id, ${row.key_id}, ${row.user_id}, 'queued', ${JSON.stringify(row.input)}::jsonb, 1,
             ${row.created_at}, ${row.start_deadline_at}, ${row.authorization_expires_at}
      FROM conversation c
      ON CONFLICT (conversation_id) WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested')
      DO NOTHING
      RETURNING id
    ), counted AS (${counting}
    ), event AS (
      INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
      SELECT id, 1, ${eventId}, 'run.queued', ${JSON.stringify({ status: "queued" })}::jsonb, ${row.created_at} FROM run
    )
    SELECT c.workspace_id, c.agent_revision_id, (SELECT count(*) FROM run) AS admitted, (SELECT count(*) FROM counted) AS counted
    FROM (SELECT 1) one LEFT JOIN conversation c ON true`

const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // the bookkeeping of a commit made in a request's transaction (admission, a cancel) waits for its commit
  const { afterCommit } = yield* UnitOfWork
  const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
  const runColumns = sql.literal(RUN_COLUMNS)

  const conversation = (tenantId: string, environment: string, id: string) =>
    sql`SELECT * FROM conversations WHERE id = ${id} AND tenant_id = ${tenantId} AND environment = ${environment}`
      .pipe(Rows.first(ConversationRow))

  const insertConversation = (row: Omit<ConversationRow, "created_at"> & { readonly created_by_key_id: string }) =>
    Effect.flatMap(
      now,
      (at) =>
        sql`INSERT INTO conversations (id, tenant_id, environment, workspace_id, agent_revision_id, created_by_key_id, created_at)
          VALUES (${row.id}, ${row.tenant_id}, ${row.environment}, ${row.workspace_id}, ${row.agent_revision_id},
                  ${row.created_by_key_id}, ${at})
          RETURNING *`.pipe(Rows.single(ConversationRow))
    )

  const run = (id: string) => sql`SELECT ${runColumns} FROM runs r WHERE r.id = ${id}`.pipe(Rows.first(RunRow))

  /** Rows of runs this process's commits ended, until taken (at most ENDED_KEPT, the oldest dropped). */
  const endedHere = new Map<string, RunRow>()
  /**
   * Runs whose ending commit this process is making: the commit's notification can reach a waiter
   * before the committing fiber resumes, which then waits for its outcome rather than reading.
   */
  const ending = new Map<string, Deferred.Deferred<RunRow | undefined>>()
  const ended = (id: string) =>
    Effect.suspend(() => {
      const row = endedHere.get(id)
      if (row !== undefined) {
        endedHere.delete(id)
        return Effect.succeed(Option.some(row))
      }
      const pending = ending.get(id)
      if (pending === undefined) return run(id)
      return Effect.flatMap(Deferred.await(pending), (row) => {
        if (row === undefined) return run(id)
        endedHere.delete(id)
        return Effect.succeed(Option.some(row))
      })
    })
  const keepEnded = (row: RunRow) => remember(endedHere, row.id, row, ENDED_KEPT)

  /**
   * Runs this process admitted, until their actor takes them (`starting`): at most ENDED_KEPT, the
   * oldest dropped, and only within ADMITTED_FRESH_MS of the admission (an actor starts within
   * milliseconds of it; a run whose cell moved meanwhile is read).
   */
  const admittedHere = new Map<string, { readonly row: RunRow; readonly at: number }>()
  const starting = (id: string) =>
    Effect.suspend(() => {
      const admitted = admittedHere.get(id)
      if (admitted === undefined) return run(id)
      admittedHere.delete(id)
      return Date.now() - admitted.at <= ADMITTED_FRESH_MS ? Effect.succeed(Option.some(admitted.row)) : run(id)
    })

  const runOfCell = (tenantId: string, environment: string, id: string) =>
    Effect.map(run(id), Option.filter((r) => r.tenant_id === tenantId && r.environment === environment))

  /**
   * The run with its first event, then the input item (both in the request's transaction, so
   * atomic). Two statements: the run's insert waits for the transaction of a conflicting open run
   * of the conversation, which may end that run and append its last items meanwhile; the item's
   * position is read by a statement of its own, whose snapshot sees them (in the run's statement,
   * it was read from before the wait and collided with them: 500 on `conversation_items_pkey`).
   */
  const admit = (row: Admission, limits: QuotaLimits) =>
    Effect.gen(function*() {
      const eventId = yield* makeId("evt")
      const cell = { tenantId: row.tenant_id, environment: row.environment }
      // The run first, then its count against the quotas: the run's insert may wait for the
      // transaction of the conversation's open run, and that run's commit takes the counters' row
      // lock (ending the run frees a place): taking it before the wait could deadlock.
      const { admitted, agent_revision_id, counted, workspace_id } = yield* admissionStatement(
        sql,
        row,
        eventId,
        countAdmission(sql, cell, limits, row.created_at, sql`run`)
      ).pipe(Rows.single(AdmittedRow))
      if (workspace_id === null || agent_revision_id === null) return { _tag: "ConversationNotFound" } as const
      const conversation = { workspace_id, agent_revision_id }
      if (admitted !== 1) return { _tag: "ConversationBusy" } as const
      if (counted !== 1) {
        const used = yield* usedNow(sql, cell, row.created_at)
        return { _tag: "OverQuota", quota: exhausted(RUN_QUOTAS, limits, used) ?? "concurrent_runs" } as const
      }
      yield* sql`
        INSERT INTO conversation_items (conversation_id, position, run_id, item, created_at)
        SELECT ${row.conversation_id}, COALESCE(MAX(position), 0) + 1, ${row.id}, ${JSON.stringify(row.item)}::jsonb,
               ${row.created_at}
        FROM conversation_items WHERE conversation_id = ${row.conversation_id}`
      // Counted and kept once the request's transaction committed (admission runs inside it).
      yield* afterCommit(Effect.zipRight(
        recordRunCommit("none", [{ type: "run.queued", data: { status: "queued" } }]),
        Effect.sync(() => {
          const admitted = admittedRow(row, eventId, conversation)
          keep(admitted)
          remember(admittedHere, row.id, { row: admitted, at: Date.now() }, ENDED_KEPT)
        })
      ))
      return { _tag: "Admitted", eventId, conversation } as const
    })

  /**
   * The run's row for a commit of the run actor of cell generation `fence`: the run locked, its
   * environment's row held `FOR KEY SHARE` (a generation bump takes `FOR UPDATE` first, so it waits
   * for this commit, and later commits see the new generation). Another generation: the fiber is
   * interrupted, nothing written.
   */
  const fenced = (runId: string, fence: number) =>
    Effect.gen(function*() {
      const row = yield* sql`
        SELECT r.*, e.cell_generation AS fence_generation
        FROM runs r JOIN environments e ON e.tenant_id = r.tenant_id AND e.name = r.environment
        WHERE r.id = ${runId}
        FOR UPDATE OF r FOR KEY SHARE OF e`.pipe(Rows.maybe(FencedRow))
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

  /**
   * Runs as this process last wrote them (its admission or commit), for the next commit of their
   * actor to plan from without reading (issue 20: the actor is the run's only writer but for a
   * cancel, and its commit checks the run's version in the database). Unfinished runs only, at
   * most KEPT, the oldest dropped.
   */
  const kept = new Map<string, Locked>()
  const keep = (row: Locked) => RunState.isTerminal(row.status) ? kept.delete(row.id) : remember(kept, row.id, row, KEPT)

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
  const guarded = (known: Locked, commits: ReadonlyArray<Commit<unknown>>, fence: number) =>
    Effect.gen(function*() {
      const at = yield* now
      const planned = plan(known, commits, at)
      if (Either.isLeft(planned)) return undefined
      const p = planned.right
      const rows = yield* rowsOf(known, p, at)
      const guard = sql`
        SELECT r.id FROM runs r JOIN environments e ON e.tenant_id = r.tenant_id AND e.name = r.environment
        WHERE r.id = ${known.id} AND r.last_sequence = ${known.last_sequence} AND r.status = ${known.status}
          AND e.cell_generation = ${fence}
        FOR UPDATE OF r FOR KEY SHARE OF e`
      const row = applied(known, p, rows.events.at(-1)?.id ?? null)
      const ends = RunState.isTerminal(p.status) && !RunState.isTerminal(known.status)
      const outcome = Deferred.unsafeMake<RunRow | undefined>(FiberId.none)
      if (ends) ending.set(known.id, outcome)
      const updated = yield* write(sql, guard, known, p, rows, at).pipe(
        Effect.tap((n) => (n === 1 && ends ? Effect.sync(() => keepEnded(row)) : Effect.void)),
        Effect.ensuring(
          ends
            ? Effect.suspend(() => {
              if (ending.get(known.id) === outcome) ending.delete(known.id)
              return Deferred.succeed(outcome, endedHere.get(known.id))
            })
            : Effect.void
        )
      )
      if (updated !== 1) return undefined
      const committed: Committed = Either.right({ status: p.status, from: known.status, events: rows.events, row, endedKept: ends })
      return committed
    })

  /** The commit under the run's lock (fenced by the cell's generation when `fence` is given). */
  const lockedCommit = <E>(runId: string, commits: ReadonlyArray<Commit<E>>, fence?: number) =>
    sql.withTransaction(Effect.gen(function*() {
      const locked = fence === undefined
        ? yield* sql`SELECT * FROM runs WHERE id = ${runId} FOR UPDATE`.pipe(Rows.maybe(LockedRow))
        : yield* fenced(runId, fence)
      if (!locked) return Either.left(new RunState.TransitionRefused({ status: "queued", trigger: commits[0]!.trigger._tag }))
      const at = yield* now
      const planned = plan(locked, commits, at)
      if (Either.isLeft(planned)) return Either.left(planned.left)
      const p = planned.right
      const rows = yield* rowsOf(locked, p, at)
      yield* write(sql, sql`SELECT ${runId}::text AS id`, locked, p, rows, at)
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
      const known = fence === undefined || commits.some((c) => c.also !== undefined) ? undefined : kept.get(runId)
      if (known === undefined) return lockedCommit(runId, commits, fence)
      return Effect.flatMap(guarded(known, commits, fence!), (committed) => {
        if (committed !== undefined) return Effect.succeed(committed)
        kept.delete(runId)
        return lockedCommit(runId, commits, fence)
      })
    }).pipe(
      // Counted and kept once committed: now, or after the enclosing request's transaction (a cancel).
      Effect.tap((committed) =>
        Either.isRight(committed)
          ? afterCommit(Effect.zipRight(
            recordRunCommit(committed.right.from, committed.right.events),
            Effect.sync(() => {
              keep(committed.right.row)
              const ends = RunState.isTerminal(committed.right.status) && !RunState.isTerminal(committed.right.from)
              if (ends && committed.right.endedKept !== true) {
                keepEnded(committed.right.row)
              }
            })
          ))
          : Effect.void
      )
    )

  const items = (conversationId: string, budgetBytes: number) =>
    sql`${itemsQuery(sql, conversationId, budgetBytes)} ORDER BY position`.pipe(
      Rows.all(ItemRow),
      Effect.map((rows) => rows.map((r) => r.item))
    )

  const eventPosition = (eventId: string) =>
    sql`SELECT run_id, sequence FROM run_events WHERE id = ${eventId}`.pipe(
      Rows.first(PositionRow)
    )

  const eventsAfter = (runId: string, afterSequence: number, limit: number) =>
    sql`SELECT id, run_id, sequence, type, data, created_at FROM run_events
        WHERE run_id = ${runId} AND sequence > ${afterSequence}
        ORDER BY sequence LIMIT ${limit}`.pipe(Rows.all(EventRow))

  const openRuns = sql`
    SELECT id, tenant_id, environment FROM runs
    WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested') ORDER BY id`.pipe(
    Rows.all(Schema.Struct({ id: Schema.String, tenant_id: Schema.String, environment: EnvironmentName }))
  )

  const openRunsOf = (tenantId: string, environment: string) =>
    sql`SELECT id FROM runs WHERE tenant_id = ${tenantId} AND environment = ${environment}
          AND status IN ('queued', 'running', 'requires_action', 'cancel_requested') ORDER BY id`.pipe(
      Rows.all(Schema.Struct({ id: Schema.String })),
      Effect.map((rows) => rows.map((r) => r.id))
    )

  return {
    conversation,
    insertConversation,
    run,
    starting,
    ended,
    runOfCell,
    admit,
    commitAll,
    items,
    eventPosition,
    eventsAfter,
    openRuns,
    openRunsOf
  } satisfies RunStoreShape
})

/** The run store in Postgres. */
export const RunStoreSql: Layer.Layer<RunStore, never, SqlClient.SqlClient | UnitOfWork> = Layer.effect(RunStore, make)
