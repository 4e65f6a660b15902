/**
 * What the idempotency suites (test/Idempotency.*.test.ts) share: their sandbox and key, the
 * assertions of a replay and of a fresh error, and reads of the stored records and of the rows a
 * request made.
 */
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { TestApp } from "./App.js"
import { provisionSandbox, type Reply } from "./Client.js"
import { pg } from "./Database.js"
import { expectErrorCode } from "./Envelopes.js"

/** The key of the idempotency sandboxes: users, service actors, keys. */
export const IDEMPOTENCY_SCOPES = ["users:read", "users:write", "service-actors:read", "service-actors:write", "keys:read", "keys:revoke"]

/** A sandbox whose first key has IDEMPOTENCY_SCOPES. */
export const sandbox = (organization = "Acme") => provisionSandbox(IDEMPOTENCY_SCOPES, organization)

export const replayed = (r: Reply) => r.headers.get("idempotent-replayed")

/** Asserts `r` is the same response as `original`, served again from the store. */
export const expectReplayOf = (r: Reply, original: Reply) => {
  expect(r.status).toBe(original.status)
  expect(r.text).toBe(original.text) // byte-identical, original request_id included
  expect(replayed(r)).toBe("true")
  expect(r.headers.get("x-request-id")).toBe(original.headers.get("x-request-id"))
  expect(r.headers.get("location")).toBe(original.headers.get("location"))
  expect(r.headers.get("content-type")).toMatch(/^application\/json/)
  expect(r.headers.get("cache-control")).toBe("no-store")
}

/** The error envelope of `status` with `code`, answered by this request (not a replay). */
export const expectFreshError = (r: Reply, status: number, code: string) => {
  expectErrorCode(r, status, code)
  expect(replayed(r)).toBeNull()
}

/** The stored idempotency records, of a tenant and/or a key. */
export const idemRows = (where: { tenantId?: string; key?: string } = {}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{
      actor: string
      method: string
      path: string
      key: string
      status: number
      body: string
      headers: Record<string, string>
    }>`SELECT actor, method, path, key, status, body, headers FROM idempotency_keys
       WHERE (${where.tenantId ?? null}::text IS NULL OR tenant_id = ${where.tenantId ?? null})
         AND (${where.key ?? null}::text IS NULL OR key = ${where.key ?? null})`.pipe(Effect.orDie))

/** Rows of the tenant; service actors without the quickstart's (made at provisioning). */
export const count = (
  table: "users" | "service_actors" | "deletion_jobs" | "runs",
  tenantId: string,
  extra?: { column: string; value: string }
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)} WHERE tenant_id = ${tenantId}
                       ${table === "service_actors" ? sql`AND id NOT IN (SELECT service_actor_id FROM quickstarts)` : sql``}
                       ${extra ? sql`AND ${sql(extra.column)} = ${extra.value}` : sql``}`.pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.orDie
    ))

/**
 * Holds the idempotency lock of a scope on a connection of our own to the app's database, as an
 * in-flight request's transaction would (the same key as src/Edge/IdempotencyRepo.ts: its parts
 * joined by newlines, hashed by Postgres). `release` ends the connection, as a dying process's does.
 */
export const holdScope = (s: { tenantId: string; actor: string; path: string; key: string; method?: string }) =>
  Effect.gen(function*() {
    const app = yield* TestApp
    const holder = new pg.Client({ connectionString: app.databaseUrl })
    yield* Effect.promise(() => holder.connect())
    const lockKey = [s.tenantId, "sandbox", s.actor, s.method ?? "POST", s.path, s.key].join("\n")
    yield* Effect.promise(() => holder.query(`SELECT pg_advisory_lock(hashtextextended('${lockKey.replace(/'/g, "''")}', 0))`))
    return { release: Effect.promise(() => holder.end()) }
  })
