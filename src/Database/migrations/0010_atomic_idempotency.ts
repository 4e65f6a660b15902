import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Idempotency is atomic (D19): a record is written in the transaction of the mutation it answers,
 * and a request in flight holds a transaction-scoped advisory lock instead of a reservation row.
 * Reservations left by earlier versions (`in_flight` rows, their `locked_until`) and the request
 * references that let a retry take one over (migration 0008) go.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM idempotency_keys WHERE state <> 'completed' OR status IS NULL OR headers IS NULL OR body IS NULL`
  yield* sql`
    ALTER TABLE idempotency_keys
      DROP COLUMN state,
      DROP COLUMN locked_until,
      ALTER COLUMN status SET NOT NULL,
      ALTER COLUMN headers SET NOT NULL,
      ALTER COLUMN body SET NOT NULL`
  yield* sql`ALTER TABLE runs DROP COLUMN idempotency_ref`
  yield* sql`ALTER TABLE approvals DROP COLUMN decided_ref`
})
