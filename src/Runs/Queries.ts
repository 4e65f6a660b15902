/**
 * The Runs SQL other capabilities compose (the Runs front door's queries): the conversation's
 * window, which the Runtime reads with the rest of a run's first dispatch in one round trip
 * (src/Runtime/DispatchReads.ts), and the run store's `items` on its own.
 */
import type { SqlClient } from "@effect/sql"

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
