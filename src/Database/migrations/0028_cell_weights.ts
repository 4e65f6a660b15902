import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Fair shares between cells (issue 36): the weights an operator set through the operator API
 * (`PUT /operator/v1/tenants/{t}/environments/{e}/share`), one row per environment whose weight
 * is not the default. Every node reads them (src/Operator/Weights.ts) into the weights its fair
 * shares grant by; a row wins over the node's `CELL_WEIGHTS`. It goes with its environment.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE cell_weights (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      weight double precision NOT NULL CHECK (weight > 0 AND weight <= 1000),
      updated_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments (tenant_id, name) ON DELETE CASCADE
    )`
})
