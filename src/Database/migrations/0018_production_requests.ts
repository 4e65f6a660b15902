import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Production requests (D17): a tenant asks, from its sandbox, for a `production` environment.
 *
 * - `production_requests`: one row per request, of the tenant's `sandbox` (its data goes with the
 *   sandbox's purge). `submitted` until an operator decides: `approved` or `rejected`, with
 *   `decided_at` and an optional `decision_reason`.
 * - `production_requests_open`: a unique partial index on the tenant over `submitted` rows, so "one
 *   open request per tenant" holds under concurrency: the insert is `ON CONFLICT ... DO NOTHING`
 *   (409 `production_request_open` when it inserted nothing), never a check then an insert.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE production_requests (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL CHECK (environment = 'sandbox'),
      status text NOT NULL CHECK (status IN ('submitted', 'approved', 'rejected')),
      use_case text NOT NULL,
      expected_monthly_runs integer NOT NULL CHECK (expected_monthly_runs > 0),
      contact_email text NOT NULL,
      decision_reason text,
      created_at timestamptz NOT NULL,
      decided_at timestamptz,
      CHECK ((status = 'submitted') = (decided_at IS NULL)),
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE UNIQUE INDEX production_requests_open ON production_requests (tenant_id) WHERE status = 'submitted'`
  yield* sql`CREATE INDEX production_requests_tenant ON production_requests (tenant_id, id)`
  yield* sql`CREATE INDEX production_requests_status ON production_requests (status, id)`
})
