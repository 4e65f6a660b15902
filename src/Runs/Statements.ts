/**
 * The run store's statements (src/Runs/Repo.ts decides which to make and when): every SQL text of
 * the run store in Postgres, each with the schema of its rows. The reads (a conversation, a run,
 * the conversation's window, events after a sequence, the open runs), the admission's statements,
 * and a commit's: the run locked and read (`FOR UPDATE`, fenced by the cell's generation or not),
 * the guard of a commit planned without reading, the rows a plan (src/Runs/Commit.ts) writes, and
 * the one statement that writes all of them.
 */
import { type SqlClient, type Statement } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import * as RunState from "../Domain/RunState.js"
import { EnvironmentName, makeId } from "../Kernel/Ids.js"
import { countRunCommit } from "../Quotas/Queries.js"
import type { Plan } from "./Commit.js"
import { itemsQuery } from "./Queries.js"
import { type Admission, ConversationRow, EventRow, RunRow } from "./RunStore.js"

/** Row shapes decoded on hot paths, made once (a schema made per call is compiled per call). */
const AdmittedRow = Schema.Struct({
  workspace_id: Schema.NullOr(Schema.String),
  agent_revision_id: Schema.NullOr(Schema.String),
  admitted: Rows.Int8,
  counted: Rows.Int8
})
const ItemRow = Schema.Struct({ item: Schema.Unknown })
const PositionRow = Schema.Struct({ run_id: Schema.String, sequence: Schema.Number })
const OpenRunRow = Schema.Struct({ id: Schema.String, tenant_id: Schema.String, environment: EnvironmentName })
const IdRow = Schema.Struct({ id: Schema.String })

const RUN_COLUMNS = `r.*, (SELECT e.id FROM run_events e WHERE e.run_id = r.id AND e.sequence = r.last_sequence) AS last_event_id`
const LockedRow = RunRow.pipe(Schema.omit("last_event_id"))
const FencedRow = Schema.extend(LockedRow, Schema.Struct({ fence_generation: Schema.Number }))

// ---- reads -------------------------------------------------------------------------------------

export const conversation = (sql: SqlClient.SqlClient, tenantId: string, environment: string, id: string) =>
  sql`SELECT * FROM conversations WHERE id = ${id} AND tenant_id = ${tenantId} AND environment = ${environment}`
    .pipe(Rows.first(ConversationRow))

export const insertConversation = (
  sql: SqlClient.SqlClient,
  row: Omit<ConversationRow, "created_at"> & { readonly created_by_key_id: string },
  at: Date
) =>
  sql`INSERT INTO conversations (id, tenant_id, environment, workspace_id, agent_revision_id, created_by_key_id, created_at)
    VALUES (${row.id}, ${row.tenant_id}, ${row.environment}, ${row.workspace_id}, ${row.agent_revision_id},
            ${row.created_by_key_id}, ${at})
    RETURNING *`.pipe(Rows.single(ConversationRow))

/** The run with its last event's id. */
export const run = (sql: SqlClient.SqlClient, id: string) =>
  sql`SELECT ${sql.literal(RUN_COLUMNS)} FROM runs r WHERE r.id = ${id}`.pipe(Rows.first(RunRow))

/** The conversation's window in order (`RunStore.items`). */
export const items = (sql: SqlClient.SqlClient, conversationId: string, budgetBytes: number) =>
  sql`${itemsQuery(sql, conversationId, budgetBytes)} ORDER BY position`.pipe(
    Rows.all(ItemRow),
    Effect.map((rows) => rows.map((r) => r.item))
  )

export const eventPosition = (sql: SqlClient.SqlClient, eventId: string) =>
  sql`SELECT run_id, sequence FROM run_events WHERE id = ${eventId}`.pipe(Rows.first(PositionRow))

export const eventsAfter = (sql: SqlClient.SqlClient, runId: string, afterSequence: number, limit: number) =>
  sql`SELECT id, run_id, sequence, type, data, created_at FROM run_events
      WHERE run_id = ${runId} AND sequence > ${afterSequence}
      ORDER BY sequence LIMIT ${limit}`.pipe(Rows.all(EventRow))

/** Every unfinished run, with its cell. */
export const openRuns = (sql: SqlClient.SqlClient) =>
  sql`
    SELECT id, tenant_id, environment FROM runs
    WHERE status IN ('queued', 'running', 'requires_action', 'cancel_requested') ORDER BY id`.pipe(Rows.all(OpenRunRow))

/** The ids of a cell's unfinished runs. */
export const openRunsOf = (sql: SqlClient.SqlClient, tenantId: string, environment: string) =>
  sql`SELECT id FROM runs WHERE tenant_id = ${tenantId} AND environment = ${environment}
        AND status IN ('queued', 'running', 'requires_action', 'cancel_requested') ORDER BY id`.pipe(
    Rows.all(IdRow),
    Effect.map((rows) => rows.map((r) => r.id))
  )

// ---- admission ---------------------------------------------------------------------------------

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

/** The admission's statement, its one row decoded. */
export const admission = (sql: SqlClient.SqlClient, row: Admission, eventId: string, counting: Statement.Fragment) =>
  admissionStatement(sql, row, eventId, counting).pipe(Rows.single(AdmittedRow))

/**
 * The admitted run's input as the conversation's next item: a statement after the admission's, so
 * that its snapshot sees the items a conflicting run appended while the admission waited for it.
 */
export const appendInput = (sql: SqlClient.SqlClient, row: Admission) =>
  sql`
    INSERT INTO conversation_items (conversation_id, position, run_id, item, created_at)
    SELECT ${row.conversation_id}, COALESCE(MAX(position), 0) + 1, ${row.id}, ${JSON.stringify(row.item)}::jsonb,
           ${row.created_at}
    FROM conversation_items WHERE conversation_id = ${row.conversation_id}`

// ---- a commit ----------------------------------------------------------------------------------

/** The run as a commit reads it (without its last event's id). */
export type Locked = Omit<RunRow, "last_event_id">

/** The run locked and read (`FOR UPDATE`), for a commit that is not fenced (a cancel request). */
export const lockRun = (sql: SqlClient.SqlClient, runId: string) =>
  sql`SELECT * FROM runs WHERE id = ${runId} FOR UPDATE`.pipe(Rows.maybe(LockedRow))

/**
 * The run locked and read with its cell's generation: its environment's row held `FOR KEY SHARE`
 * (a generation bump takes `FOR UPDATE` first, so it waits for this commit, and later commits see
 * the new generation).
 */
export const lockFenced = (sql: SqlClient.SqlClient, runId: string) =>
  sql`
    SELECT r.*, e.cell_generation AS fence_generation
    FROM runs r JOIN environments e ON e.tenant_id = r.tenant_id AND e.name = r.environment
    WHERE r.id = ${runId}
    FOR UPDATE OF r FOR KEY SHARE OF e`.pipe(Rows.maybe(FencedRow))

/** `write`'s guard for a run already locked and read in the transaction: its id. */
export const lockedGuard = (sql: SqlClient.SqlClient, runId: string) => sql`SELECT ${runId}::text AS id`

/**
 * `write`'s guard for a commit planned from `known` without reading: the run's id while the run is
 * still at that version (its last sequence and status) and its cell at generation `fence`, taking
 * the same locks as `lockFenced`.
 */
export const knownGuard = (sql: SqlClient.SqlClient, known: Locked, fence: number) =>
  sql`
    SELECT r.id FROM runs r JOIN environments e ON e.tenant_id = r.tenant_id AND e.name = r.environment
    WHERE r.id = ${known.id} AND r.last_sequence = ${known.last_sequence} AND r.status = ${known.status}
      AND e.cell_generation = ${fence}
    FOR UPDATE OF r FOR KEY SHARE OF e`

/** The rows a plan writes: its events and usage records, with their ids. */
export const rowsOf = (locked: Locked, p: Plan, at: Date) =>
  Effect.gen(function*() {
    const events: Array<EventRow> = []
    for (const e of p.events) {
      events.push({ id: yield* makeId("evt"), run_id: locked.id, sequence: e.sequence, type: e.type, data: e.data, created_at: at })
    }
    const usage: Array<Record<string, unknown>> = []
    for (const u of p.usage) {
      usage.push({
        id: yield* makeId("rec"),
        tenant_id: locked.tenant_id,
        environment: locked.environment,
        run_id: locked.id,
        kind: u.kind,
        agent_revision_id: locked.agent_revision_id,
        model_profile_id: u.model_profile_id ?? null,
        provider: u.provider ?? null,
        model: u.model ?? null,
        tool_id: u.tool_id ?? null,
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        created_at: at
      })
    }
    return { events, usage }
  })

/**
 * Everything a planned commit writes, in one statement: data-modifying CTEs (which all run), each
 * writing only when `guard` (a query of one row: the run's id) has its row, then the run's row.
 * The events (each notified by the row trigger, at commit), the quota counters (D16: a run that
 * ended frees its place, a model call's tokens count), the conversation items appended after the
 * conversation's last one, the usage records. Answers the run's id when it updated it (no row
 * when `guard` had none).
 */
export const write = (
  sql: SqlClient.SqlClient,
  guard: Statement.Fragment,
  locked: Locked,
  p: Plan,
  rows: { events: ReadonlyArray<EventRow>; usage: ReadonlyArray<unknown> },
  at: Date
) => {
  const ctes: Array<Statement.Fragment> = [
    sql`guard AS (${guard})`,
    sql`events AS (
      INSERT INTO run_events (id, run_id, sequence, type, data, created_at)
      SELECT v.* FROM guard, jsonb_to_recordset(${JSON.stringify(rows.events)}::jsonb)
        AS v(id text, run_id text, sequence integer, type text, data jsonb, created_at timestamptz))`
  ]
  const ended = !RunState.isTerminal(locked.status) && RunState.isTerminal(p.status)
  const tokens = p.added.inputTokens + p.added.outputTokens
  if (ended || tokens > 0) {
    const cell = { tenantId: locked.tenant_id, environment: locked.environment }
    ctes.push(sql`counted AS (${countRunCommit(sql, cell, { ended, tokens }, at, sql`EXISTS (SELECT 1 FROM guard)`)})`)
  }
  if (p.items.length > 0) {
    ctes.push(sql`items AS (
      INSERT INTO conversation_items (conversation_id, position, run_id, item, created_at)
      SELECT ${locked.conversation_id}, last.position + t.ordinality, ${locked.id}, t.item, ${at}
      FROM guard,
           (SELECT COALESCE(MAX(position), 0) AS position FROM conversation_items WHERE conversation_id = ${locked.conversation_id}) last,
           jsonb_array_elements(${JSON.stringify(p.items)}::jsonb) WITH ORDINALITY AS t(item, ordinality))`)
  }
  if (rows.usage.length > 0) {
    ctes.push(sql`usage AS (
      INSERT INTO usage_records (id, tenant_id, environment, run_id, kind, agent_revision_id, model_profile_id, provider,
                                 model, tool_id, input_tokens, output_tokens, created_at)
      SELECT v.* FROM guard, jsonb_to_recordset(${JSON.stringify(rows.usage)}::jsonb)
        AS v(id text, tenant_id text, environment text, run_id text, kind text, agent_revision_id text, model_profile_id text,
             provider text, model text, tool_id text, input_tokens bigint, output_tokens bigint, created_at timestamptz))`)
  }
  return sql`
    WITH ${sql.csv(ctes)}
    UPDATE runs SET
      status = ${p.status},
      status_reason = ${p.reason},
      last_sequence = ${p.lastSequence},
      input_tokens = input_tokens + ${p.added.inputTokens},
      output_tokens = output_tokens + ${p.added.outputTokens},
      model_calls = model_calls + ${p.added.modelCalls},
      tool_calls = tool_calls + ${p.added.toolCalls},
      started_at = ${p.startedAt},
      execution_deadline_at = ${p.executionDeadlineAt},
      completed_at = ${p.completedAt},
      output = ${p.output === undefined ? sql`output` : sql`${JSON.stringify(p.output)}::jsonb`},
      required_action = ${
    p.requiredAction === undefined
      ? sql`required_action`
      : p.requiredAction === null
      ? null
      : sql`${JSON.stringify(p.requiredAction)}::jsonb`
  }
    FROM guard WHERE runs.id = guard.id
    RETURNING runs.id`
}
