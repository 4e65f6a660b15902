import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Files belong to a workspace or to the environment, and storage is a hard limit (D20).
 *
 * - `files.workspace_id`: the workspace an upload named (a workspace-bound key's own, always), or
 *   a run output's run's; null for a file of the environment. Existing files stay the
 *   environment's. A workspace-bound key reads, lists, downloads, deletes and uses as run input
 *   only its workspace's (src/Files.ts); the index serves its list.
 * - Workspace memory values count toward `quota_usage.storage_bytes` (the UTF-8 bytes of each stored
 *   JSON value, src/Memory/Repo.ts): the values stored so far are counted here, once.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE files ADD COLUMN workspace_id text REFERENCES workspaces(id)`
  yield* sql`CREATE INDEX files_workspace ON files (tenant_id, environment, workspace_id, id) WHERE workspace_id IS NOT NULL`
  yield* sql`
    INSERT INTO quota_usage AS u (tenant_id, environment, storage_bytes)
    SELECT tenant_id, environment, sum(octet_length(value::text)) FROM workspace_memory GROUP BY tenant_id, environment
    ON CONFLICT (tenant_id, environment) DO UPDATE SET storage_bytes = u.storage_bytes + EXCLUDED.storage_bytes`
})
