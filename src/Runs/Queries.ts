/**
 * The Runs SQL other capabilities compose (the Runs front door's queries): the conversation's
 * window, and what a run's first dispatch reads in one round trip (the key's authorization, the
 * pinned revision and the window: `firstDispatchQuery`), which the Runtime reads
 * (src/Runtime/DispatchReads.ts) unless the run's admission read it with its last statement.
 */
import type { SqlClient, Statement } from "@effect/sql"

import { RevisionContext, revisionContextQuery } from "../Agents/Queries.js"
import { authorizationQuery } from "../Platform/Queries.js"

/**
 * The window of `items` (a relation of `item` and `position`): everything since its latest user
 * message, and earlier items while the stored size of those after them stays within `budgetBytes`.
 */
const windowOf = (sql: SqlClient.SqlClient, items: Statement.Fragment, budgetBytes: number) =>
  sql`WITH sized AS (
        SELECT item, position, sum(pg_column_size(item)) OVER (ORDER BY position DESC) AS newer_bytes
        FROM ${items} i
      )
      SELECT item, position FROM sized
      WHERE newer_bytes <= ${budgetBytes}
         OR position >= (SELECT COALESCE(max(position), 0) FROM ${items} u WHERE u.item->>'type' = 'user_message')`

/**
 * The conversation's window (`RunStore.items`), unordered: rows of `item` and `position`. A query of
 * its own, so that the run actor's first dispatch can read it with the rest of what it needs
 * (src/Runtime/DispatchReads.ts).
 */
export const itemsQuery = (sql: SqlClient.SqlClient, conversationId: string, budgetBytes: number) =>
  windowOf(sql, sql`(SELECT item, position FROM conversation_items WHERE conversation_id = ${conversationId})`, budgetBytes)

/**
 * The window of a conversation whose next item (`pending`, at the next position) is being written by
 * the same statement, which cannot see it: `itemsQuery` as it will answer once that is committed.
 * (A large item's size is its size before Postgres compresses it: the window may keep fewer older
 * items than a read after the commit would.)
 */
const itemsWithPendingQuery = (sql: SqlClient.SqlClient, conversationId: string, budgetBytes: number, pending: unknown) =>
  windowOf(
    sql,
    sql`(SELECT item, position FROM conversation_items WHERE conversation_id = ${conversationId}
         UNION ALL
         SELECT ${JSON.stringify(pending)}::jsonb, COALESCE(MAX(position), 0) + 1
         FROM conversation_items WHERE conversation_id = ${conversationId})`,
    budgetBytes
  )

/** The run as its first dispatch's read needs it. */
export interface Dispatched {
  readonly key_id: string
  readonly user_id: string | null
  readonly agent_revision_id: string
  readonly conversation_id: string
}

/** The revision's columns, as `revisionContextQuery` names them. */
const REVISION_COLUMNS = Object.keys(RevisionContext.fields).map((c) => `c.${c}`).join(", ")

/**
 * What a run's first dispatch reads, in one statement: one row of `authorization` (null: no such
 * key), the revision's columns (`RevisionContext`; a null `model_profile_id`: the revision is gone)
 * and `items`, the window in order (JSON). With `pending`, the window ends with that item, which
 * the statement carrying this read writes (the run's admission).
 */
export const firstDispatchQuery = (
  sql: SqlClient.SqlClient,
  run: Dispatched,
  budgetBytes: number,
  at: Date,
  pending?: { readonly item: unknown }
) =>
  sql`
    SELECT a.authorization, ${sql.literal(REVISION_COLUMNS)},
           (SELECT jsonb_agg(w.item ORDER BY w.position) FROM (${
    pending === undefined
      ? itemsQuery(sql, run.conversation_id, budgetBytes)
      : itemsWithPendingQuery(sql, run.conversation_id, budgetBytes, pending.item)
  }) w) AS items
    FROM (SELECT 1) one
    LEFT JOIN (${authorizationQuery(sql, run.key_id, run.user_id, at)}) a ON TRUE
    LEFT JOIN (${revisionContextQuery(sql, run.agent_revision_id)}) c ON TRUE`
