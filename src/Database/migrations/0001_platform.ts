import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** Platform foundation: tenants, environments, keys, actors, deletion, idempotency, pilots. */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE pilot_applications (
      id text PRIMARY KEY,
      organization_name text NOT NULL,
      contact_email text NOT NULL,
      status text NOT NULL CHECK (status IN ('submitted', 'approved', 'rejected')),
      tenant_id text,
      created_at timestamptz NOT NULL,
      decided_at timestamptz
    )`
  yield* sql`
    CREATE TABLE tenants (
      id text PRIMARY KEY,
      name text NOT NULL,
      status text NOT NULL CHECK (status IN ('active', 'deleting', 'deleted')),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL
    )`
  yield* sql`
    CREATE TABLE environments (
      tenant_id text NOT NULL REFERENCES tenants(id),
      name text NOT NULL CHECK (name IN ('sandbox', 'production')),
      id text NOT NULL UNIQUE,
      state text NOT NULL CHECK (state IN ('provisioning', 'ready', 'suspended', 'deleting', 'deleted')),
      cell_generation integer NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, name)
    )`
  yield* sql`
    CREATE TABLE users (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      external_id text,
      display_name text,
      email text,
      status text NOT NULL CHECK (status IN ('active', 'deleted')),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      deleted_at timestamptz,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE UNIQUE INDEX users_external_id ON users (tenant_id, environment, external_id) WHERE status = 'active'`
  yield* sql`CREATE INDEX users_page ON users (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE service_actors (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX service_actors_page ON service_actors (tenant_id, environment, id)`
  yield* sql`
    CREATE TABLE api_keys (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      name text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('quickstart', 'console', 'derived')),
      prefix text NOT NULL,
      secret_hash bytea NOT NULL UNIQUE,
      scopes text[] NOT NULL,
      service_actor_id text REFERENCES service_actors(id),
      user_id text REFERENCES users(id),
      parent_key_id text REFERENCES api_keys(id),
      created_at timestamptz NOT NULL,
      revoked_at timestamptz,
      revoked_reason text,
      FOREIGN KEY (tenant_id, environment) REFERENCES environments(tenant_id, name)
    )`
  yield* sql`CREATE INDEX api_keys_page ON api_keys (tenant_id, environment, id)`
  yield* sql`CREATE INDEX api_keys_parent ON api_keys (parent_key_id) WHERE parent_key_id IS NOT NULL`
  yield* sql`CREATE INDEX api_keys_user ON api_keys (user_id) WHERE user_id IS NOT NULL`
  yield* sql`
    CREATE TABLE deletion_jobs (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      environment text NOT NULL,
      resource_type text NOT NULL CHECK (resource_type IN ('tenant', 'environment', 'user')),
      resource_id text NOT NULL,
      state text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
      purge_after timestamptz NOT NULL,
      created_at timestamptz NOT NULL,
      started_at timestamptz,
      completed_at timestamptz,
      attempts integer NOT NULL DEFAULT 0,
      error text
    )`
  yield* sql`CREATE INDEX deletion_jobs_due ON deletion_jobs (purge_after) WHERE state IN ('queued', 'running')`
  yield* sql`
    CREATE TABLE tombstones (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      kind text NOT NULL,
      key text NOT NULL,
      resource_id text NOT NULL,
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment, kind, key)
    )`
  yield* sql`
    CREATE TABLE idempotency_keys (
      tenant_id text NOT NULL,
      environment text NOT NULL,
      actor text NOT NULL,
      method text NOT NULL,
      path text NOT NULL,
      key text NOT NULL,
      fingerprint text NOT NULL,
      state text NOT NULL CHECK (state IN ('in_flight', 'completed')),
      locked_until timestamptz,
      status integer,
      headers jsonb,
      body text,
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, environment, actor, method, path, key)
    )`
  yield* sql`CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at)`
})
