import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Files belong to a workspace or to the environment (D20).
 *
 * - `files.workspace_id`: the workspace an upload named (a workspace-bound key's own, always), or
 *   a run output's run's; null for a file of the environment. Existing files stay the
 *   environment's. A workspace-bound key reads, lists, downloads, deletes and uses as run input
 *   only its workspace's (src/Files.ts); the index serves its list.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE files ADD COLUMN workspace_id text REFERENCES workspaces(id)`
  yield* sql`CREATE INDEX files_workspace ON files (tenant_id, environment, workspace_id, id) WHERE workspace_id IS NOT NULL`
})
