/**
 * The SQL of a run commit (src/Runs/Repo.ts decides when and how it is guarded): the rows a plan
 * (src/Runs/Commit.ts) writes, and the one statement that writes all of them.
 */
import { type SqlClient, type Statement } from "@effect/sql"
import { Effect } from "effect"

import * as RunState from "../Domain/RunState.js"
import { makeId } from "../Kernel/Ids.js"
import { countRunCommit } from "../Quotas/Repo.js"
import type { Plan } from "./Commit.js"
import type { EventRow, RunRow } from "./RunStore.js"

/** The run as a commit reads it (without its last event's id). */
export type Locked = Omit<RunRow, "last_event_id">

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
 * conversation's last one, the usage records. Answers how many runs it updated (0 or 1).
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
    RETURNING runs.id`.pipe(Effect.map((updated) => updated.length))
}
