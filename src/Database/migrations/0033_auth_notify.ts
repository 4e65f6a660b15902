import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * What a key authenticates as may change (issue 37): a key revoked or expired early (rotation), a
 * tenant or an environment being deleted. Each process keeps the keys it authenticated lately
 * (src/Platform/KeyCache.ts); a statement that changes one of those notifies channel
 * `auth_changed` at its commit, and every process forgets them all (such statements are rare). An
 * UPDATE of columns the authentication does not read (an environment's cell generation, a tenant's name) notifies nothing.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE FUNCTION auth_changed_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('auth_changed', '');
      RETURN NULL;
    END $$`
  yield* sql`CREATE TRIGGER api_keys_auth_changed AFTER UPDATE OF revoked_at, expires_at, scopes, kind, secret_hash, tenant_id, environment
             OR DELETE ON api_keys
             FOR EACH STATEMENT EXECUTE FUNCTION auth_changed_notify()`
  yield* sql`CREATE TRIGGER tenants_auth_changed AFTER UPDATE OF status OR DELETE ON tenants
             FOR EACH STATEMENT EXECUTE FUNCTION auth_changed_notify()`
  yield* sql`CREATE TRIGGER environments_auth_changed AFTER UPDATE OF state OR DELETE ON environments
             FOR EACH STATEMENT EXECUTE FUNCTION auth_changed_notify()`
})
