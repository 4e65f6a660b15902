/**
 * SQL of conversations, runs, run events, conversation items and usage records.
 *
 * The one way a run changes is `commit`: in one transaction it locks the run's row, asks the state
 * machine (src/Domain/RunState.ts) whether the trigger applies, appends the event with the next
 * sequence, updates the run, and writes the step's conversation items and usage records. So an
 * event, the state it reports and the usage it caused are durable together or not at all, and two
 * writers (the run actor and a cancel request) are serialised by the row lock.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Either, Option } from "effect"
import { makeId, toIso } from "../Kernel/Ids.js"
import type { Conversation, Run, RunEvent, TextContent } from "../Domain/Runs.js"
import * as RunState from "../Domain/RunState.js"

export interface ConversationRow {
  id: string
  tenant_id: string
  environment: string
  workspace_id: string
  agent_revision_id: string
  created_at: Date
}

export interface RunRow {
  id: string
  tenant_id: string
  environment: string
  workspace_id: string
  conversation_id: string
  agent_revision_id: string
  key_id: string
  user_id: string | null
  idempotency_ref: string | null
  status: RunState.RunStatus
  status_reason: string | null
  input: ReadonlyArray<TextContent> | null
  output: ReadonlyArray<TextContent> | null
  required_action: Record<string, unknown> | null
  input_tokens: string | number
  output_tokens: string | number
  model_calls: number
  tool_calls: number
  last_sequence: number
  created_at: Date
  started_at: Date | null
  completed_at: Date | null
  start_deadline_at: Date
  execution_deadline_at: Date | null
  authorization_expires_at: Date
  last_event_id: string | null
}

export interface EventRow {
  id: string
  run_id: string
  sequence: number
  type: RunState.EventType
  data: Record<string, unknown>
  created_at: Date
}

export const toConversation = (r: ConversationRow): Conversation => ({
  id: r.id,
  object: "conversation",
  workspace_id: r.workspace_id,
  agent_revision_id: r.agent_revision_id,
  created_at: toIso(r.created_at)
})

const isoOrNull = (d: Date | null) => (d === null ? null : toIso(d))

export const toRun = (r: RunRow): Run => ({
  id: r.id,
  object: "run",
  conversation_id: r.conversation_id,
  agent_revision_id: r.agent_revision_id,
  user_id: r.user_id,
  status: r.status,
  status_reason: r.status_reason,
  input: r.input,
  output: r.output,
  required_action: r.required_action,
  usage: {
    input_tokens: Number(r.input_tokens),
    output_tokens: Number(r.output_tokens),
    model_calls: r.model_calls,
    tool_calls: r.tool_calls
  },
  created_at: toIso(r.created_at),
  started_at: isoOrNull(r.started_at),
  completed_at: isoOrNull(r.completed_at),
  start_deadline_at: toIso(r.start_deadline_at),
  execution_deadline_at: isoOrNull(r.execution_deadline_at),
  authorization_expires_at: toIso(r.authorization_expires_at),
  last_event_id: r.last_event_id
})

export const toEvent = (r: EventRow): RunEvent => ({
  id: r.id,
  object: "run.event",
  run_id: r.run_id,
  sequence: r.sequence,
  type: r.type,
  created_at: toIso(r.created_at),
  data: r.data
})

/** A usage record (D16) written with the step that caused it. */
export interface UsageRecordInput {
  readonly kind: "model_call" | "tool_call"
  readonly model_profile_id?: string | undefined
  readonly provider?: string | undefined
  readonly model?: string | undefined
  readonly tool_id?: string | undefined
  readonly input_tokens: number
  readonly output_tokens: number
}

/** What a step commits besides the event. */
export interface Commit {
  readonly trigger: RunState.Trigger
  /** The event's `data` (the run's new status and reason are added). */
  readonly data?: Record<string, unknown>
  readonly output?: ReadonlyArray<TextContent>
  readonly requiredAction?: Record<string, unknown> | null
  /** Items appended to the conversation the agent sees. */
  readonly items?: ReadonlyArray<unknown>
  readonly usage?: ReadonlyArray<UsageRecordInput>
  /** Set `execution_deadline_at` this many seconds after the commit (on start). */
  readonly executionSeconds?: number
  /** Set `execution_deadline_at` to this time (resuming after an approval wait, which it does not count). */
  readonly executionDeadlineAt?: Date
  /** More writes for the same transaction (an approval, a tool operation), run once the commit is allowed. */
  readonly also?: Effect.Effect<unknown, SqlError>
}

const RUN_COLUMNS = `r.*, (SELECT e.id FROM run_events e WHERE e.run_id = r.id AND e.sequence = r.last_sequence) AS last_event_id`

export class RunsRepo extends Effect.Service<RunsRepo>()("RunsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const now = Effect.map(Effect.clockWith((c) => c.currentTimeMillis), (ms) => new Date(ms))

    const conversation = (tenantId: string, environment: string, id: string) =>
      Effect.map(
        sql<ConversationRow>`SELECT * FROM conversations
          WHERE id = ${id} AND tenant_id = ${tenantId} AND environment = ${environment}`,
        (rows) => Option.fromNullable(rows[0])
      )

    const insertConversation = (row: Omit<ConversationRow, "created_at"> & { created_by_key_id: string }) =>
      Effect.gen(function*() {
        const [inserted] = yield* sql<ConversationRow>`
          INSERT INTO conversations (id, tenant_id, environment, workspace_id, agent_revision_id, created_by_key_id, created_at)
          VALUES (${row.id}, ${row.tenant_id}, ${row.environment}, ${row.workspace_id}, ${row.agent_revision_id},
                  ${row.created_by_key_id}, ${yield* now})
          RETURNING *`
        return inserted!
      })

    const run = (id: string) =>
      Effect.map(
        sql<RunRow>`SELECT ${sql.literal(RUN_COLUMNS)} FROM runs r WHERE r.id = ${id}`,
        (rows) => Option.fromNullable(rows[0])
      )

    const runOfCell = (tenantId: string, environment: string, id: string) =>
      Effect.map(run(id), Option.filter((r) => r.tenant_id === tenantId && r.environment === environment))

    /** The run an idempotent request admitted since `since` (see migration 0008), if any. */
    const runOfRequest = (tenantId: string, environment: string, ref: string, since: Date) =>
      Effect.map(
        sql<RunRow>`SELECT ${sql.literal(RUN_COLUMNS)} FROM runs r
                    WHERE r.tenant_id = ${tenantId} AND r.environment = ${environment}
                      AND r.idempotency_ref = ${ref} AND r.created_at > ${since}
                    ORDER BY r.created_at DESC LIMIT 1`,
        (rows) => Option.fromNullable(rows[0])
      )

    const insertEvent = (runId: string, sequence: number, type: RunState.EventType, data: Record<string, unknown>, at: Date) =>
      Effect.gen(function*() {
        const id = yield* makeId("evt")
        yield* sql`INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
                   VALUES (${runId}, ${sequence}, ${id}, ${type}, ${JSON.stringify(data)}::jsonb, ${at})`
        return { id, run_id: runId, sequence, type, data, created_at: at } satisfies EventRow
      })

    /**
     * Admission: the run, its `run.queued` event and the user's input as a conversation item, in
     * one transaction. The id of the `run.queued` event, or none when the conversation already has
     * a non-terminal run.
     */
    const admit = (
      row:
        & Pick<
          RunRow,
          | "id"
          | "tenant_id"
          | "environment"
          | "workspace_id"
          | "conversation_id"
          | "agent_revision_id"
          | "key_id"
          | "user_id"
          | "idempotency_ref"
          | "start_deadline_at"
          | "authorization_expires_at"
          | "created_at"
        >
        & { input: ReadonlyArray<TextContent>; item: unknown }
    ) =>
      // One statement (so one round trip, atomic): the run, its first event and the input item.
      Effect.gen(function*() {
        const eventId = yield* makeId("evt")
        const [result] = yield* sql<{ admitted: string }>`
          WITH run AS (
            INSERT INTO runs (id, tenant_id, environment, workspace_id, conversation_id, agent_revision_id, key_id, user_id,
                              idempotency_ref, status, input, last_sequence, created_at, start_deadline_at, authorization_expires_at)
            VALUES (${row.id}, ${row.tenant_id}, ${row.environment}, ${row.workspace_id}, ${row.conversation_id},
                    ${row.agent_revision_id}, ${row.key_id}, ${row.user_id}, ${row.idempotency_ref}, 'queued', ${JSON.stringify(row.input)}::jsonb, 1,
                    ${row.created_at}, ${row.start_deadline_at}, ${row.authorization_expires_at})
            ON CONFLICT (conversation_id) WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested')
            DO NOTHING
            RETURNING id
          ), event AS (
            INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
            SELECT id, 1, ${eventId}, 'run.queued', ${JSON.stringify({ status: "queued" })}::jsonb, ${row.created_at} FROM run
          ), item AS (
            INSERT INTO conversation_items (conversation_id, position, run_id, item, created_at)
            SELECT ${row.conversation_id},
                   COALESCE((SELECT MAX(position) FROM conversation_items WHERE conversation_id = ${row.conversation_id}), 0) + 1,
                   id, ${JSON.stringify(row.item)}::jsonb, ${row.created_at}
            FROM run
          )
          SELECT count(*) AS admitted FROM run`
        return Number(result?.admitted ?? 0) === 1 ? Option.some(eventId) : Option.none()
      })

    const appendItems = (conversationId: string, runId: string, items: ReadonlyArray<unknown>, at: Date) =>
      Effect.gen(function*() {
        if (items.length === 0) return
        const [{ next }] = yield* sql<{ next: number }>`
          SELECT COALESCE(MAX(position), 0) + 1 AS next FROM conversation_items WHERE conversation_id = ${conversationId}`
        yield* sql`INSERT INTO conversation_items ${
          sql.insert(items.map((item, i) => ({
            conversation_id: conversationId,
            position: next + i,
            run_id: runId,
            item: JSON.stringify(item),
            created_at: at
          })))
        }`
      })

    /**
     * See the module comment. Applies the commits in order in one transaction (e.g. the final
     * `run.message` and `run.succeeded`). `Left` when the state machine refuses one of them in the
     * run's state; then nothing is written.
     */
    const commitAll = (runId: string, commits: ReadonlyArray<Commit>) =>
      sql.withTransaction(Effect.gen(function*() {
        const [locked] = yield* sql<RunRow>`SELECT * FROM runs WHERE id = ${runId} FOR UPDATE`
        if (!locked) return Either.left(new RunState.TransitionRefused({ status: "queued", trigger: commits[0]!.trigger._tag }))
        // Decide everything first, so a refusal writes nothing.
        let status = locked.status
        const planned: Array<{ c: Commit; t: RunState.Transition; changed: boolean }> = []
        for (const c of commits) {
          const next = RunState.transition(status, c.trigger)
          if (Either.isLeft(next)) return Either.left(next.left)
          planned.push({ c, t: next.right, changed: next.right.status !== status })
          status = next.right.status
        }
        const at = yield* now
        let sequence = locked.last_sequence
        let reason = locked.status_reason
        let completedAt = locked.completed_at
        let startedAt = locked.started_at
        let executionDeadline = locked.execution_deadline_at
        const events: Array<EventRow> = []
        const usage: Array<UsageRecordInput> = []
        const items: Array<unknown> = []
        let output: ReadonlyArray<TextContent> | undefined
        let requiredAction: Record<string, unknown> | null | undefined
        for (const { c, changed, t } of planned) {
          sequence++
          const data = changed ? { status: t.status, status_reason: t.reason, ...c.data } : { ...c.data }
          events.push(yield* insertEvent(runId, sequence, t.event, data, at))
          if (changed) reason = t.reason
          if (changed && RunState.isTerminal(t.status)) completedAt = at
          if (c.trigger._tag === "Start") startedAt = at
          if (c.executionSeconds !== undefined) executionDeadline = new Date(at.getTime() + c.executionSeconds * 1000)
          if (c.executionDeadlineAt !== undefined) executionDeadline = c.executionDeadlineAt
          if (c.output !== undefined) output = c.output
          if (c.requiredAction !== undefined) requiredAction = c.requiredAction
          usage.push(...(c.usage ?? []))
          items.push(...(c.items ?? []))
        }
        const sum = (f: (u: UsageRecordInput) => number) => usage.reduce((n, u) => n + f(u), 0)
        yield* sql`
          UPDATE runs SET
            status = ${status},
            status_reason = ${reason},
            last_sequence = ${sequence},
            input_tokens = input_tokens + ${sum((u) => u.input_tokens)},
            output_tokens = output_tokens + ${sum((u) => u.output_tokens)},
            model_calls = model_calls + ${sum((u) => (u.kind === "model_call" ? 1 : 0))},
            tool_calls = tool_calls + ${sum((u) => (u.kind === "tool_call" ? 1 : 0))},
            started_at = ${startedAt},
            execution_deadline_at = ${executionDeadline},
            completed_at = ${completedAt},
            output = ${output === undefined ? sql`output` : sql`${JSON.stringify(output)}::jsonb`},
            required_action = ${
          requiredAction === undefined
            ? sql`required_action`
            : requiredAction === null
            ? null
            : sql`${JSON.stringify(requiredAction)}::jsonb`
        }
          WHERE id = ${runId}`
        yield* appendItems(locked.conversation_id, runId, items, at)
        for (const { c } of planned) if (c.also !== undefined) yield* c.also
        for (const u of usage) {
          yield* sql`
            INSERT INTO usage_records (id, tenant_id, environment, run_id, kind, agent_revision_id, model_profile_id,
                                       provider, model, tool_id, input_tokens, output_tokens, created_at)
            VALUES (${yield* makeId("rec")}, ${locked.tenant_id}, ${locked.environment}, ${runId}, ${u.kind},
                    ${locked.agent_revision_id}, ${u.model_profile_id ?? null}, ${u.provider ?? null}, ${u.model ?? null},
                    ${u.tool_id ?? null}, ${u.input_tokens}, ${u.output_tokens}, ${at})`
        }
        return Either.right({ status, events })
      }))

    const commit = (runId: string, c: Commit) => commitAll(runId, [c])

    const items = (conversationId: string) =>
      Effect.map(
        sql<{ item: unknown }>`SELECT item FROM conversation_items WHERE conversation_id = ${conversationId} ORDER BY position`,
        (rows) => rows.map((r) => r.item)
      )

    /** The run and sequence of an event id (for cursors and Last-Event-ID). */
    const eventPosition = (eventId: string) =>
      Effect.map(
        sql<{ run_id: string; sequence: number }>`SELECT run_id, sequence FROM run_events WHERE id = ${eventId}`,
        (rows) => Option.fromNullable(rows[0])
      )

    const eventsAfter = (runId: string, afterSequence: number, limit: number) =>
      sql<EventRow>`SELECT id, run_id, sequence, type, data, created_at FROM run_events
                    WHERE run_id = ${runId} AND sequence > ${afterSequence}
                    ORDER BY sequence LIMIT ${limit}`

    /** Non-terminal runs, for recovery after a restart. */
    const openRuns = sql<{ id: string; tenant_id: string; environment: string }>`
      SELECT id, tenant_id, environment FROM runs
      WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested') ORDER BY id`

    return {
      conversation,
      insertConversation,
      run,
      runOfCell,
      runOfRequest,
      admit,
      commit,
      commitAll,
      items,
      eventPosition,
      eventsAfter,
      openRuns
    } as const
  })
}) {}
