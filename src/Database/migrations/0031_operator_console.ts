import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The operator console (issue 39). An operator's account is a console account of kind `operator`
 * (the same passwords, sessions, TOTP and recovery codes as a member's; a session of one kind
 * opens no page of the other). A pilot application's decision keeps its reason and who decided
 * (`operator` for the shared token, else the operator account's id): a rejection names no
 * environment, so it has no audit entry to carry them.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE console_accounts
               ADD COLUMN kind text NOT NULL DEFAULT 'member' CHECK (kind IN ('member', 'operator'))`
  yield* sql`ALTER TABLE pilot_applications ADD COLUMN decision_reason text, ADD COLUMN decided_by text`
})
