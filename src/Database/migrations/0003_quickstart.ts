import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The console quickstart (contract part 1, D1): per environment, one stable service actor, one
 * workspace and one no-tools agent revision (with its agent and model profile). One row per
 * environment (the primary key), made at provisioning or on first use.
 *
 * The environment purge deletes the environment's service actors: the quickstart row goes with
 * its service actor (ON DELETE CASCADE), so a purge never trips over it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE quickstarts (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      service_actor_id text NOT NULL REFERENCES service_actors(id) ON DELETE CASCADE,
      workspace_id text NOT NULL REFERENCES workspaces(id),
      agent_id text NOT NULL REFERENCES agents(id),
      model_profile_id text NOT NULL REFERENCES model_profiles(id),
      agent_revision_id text NOT NULL REFERENCES agent_revisions(id),
      created_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
})
