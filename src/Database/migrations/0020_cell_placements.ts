import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Where each running cell is (issue 19), for operators (`GET /operator/v1/cluster`): a cell's
 * runner writes its row when the cell starts there and deletes it when the cell stops. A node that
 * dies leaves its rows; they are read only joined with the runners still alive
 * (`cluster_runners`, the cluster library's own table), and the cell's next owner overwrites them.
 */
export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`
    CREATE TABLE cell_placements (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      runner text NOT NULL,
      generation bigint NOT NULL,
      started_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (tenant_id, environment)
    )
  `
)
