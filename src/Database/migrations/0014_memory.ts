import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Workspace memory (D14).
 *
 * - `workspace_memory`: one row per (tenant, environment, workspace, key) with the value as written
 *   (`json`, the exact serialisation whose size was checked, key order kept), its version (1, then
 *   one more per write) and who wrote it (`updated_by_type`: `api_key`, `user` or `run`). Keys sort
 *   byte-wise (`COLLATE "C"`), so a list is ordered the same everywhere and a prefix is one range
 *   of the primary key.
 * - `agent_revisions.memory`: whether a revision's runs are offered the built-in memory tools.
 *   Adding the column with a constant default rewrites no row (the immutability trigger is not fired).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE workspace_memory (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      workspace_id text NOT NULL REFERENCES workspaces(id),
      key text COLLATE "C" NOT NULL CHECK (key ~ '^[A-Za-z0-9._:-]{1,128}$'),
      value json NOT NULL,
      version integer NOT NULL CHECK (version >= 1),
      updated_at timestamptz NOT NULL,
      updated_by_type text NOT NULL CHECK (updated_by_type IN ('api_key', 'user', 'run')),
      updated_by_id text NOT NULL,
      PRIMARY KEY (tenant_id, environment, workspace_id, key),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`ALTER TABLE agent_revisions ADD COLUMN memory boolean NOT NULL DEFAULT false`
})
