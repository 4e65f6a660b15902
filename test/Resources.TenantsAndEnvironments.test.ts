/**
 * The platform plane's first resources end to end over HTTP (contract parts 2, 3.2, 4; D1, D3,
 * D6): the operator plane provisioning a tenant (pilot application, approval, the first key shown
 * once and stored hashed), tenants (list, get, update, delete with a deletion job) and
 * environments.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { ALL_MANAGEMENT_SCOPES, postUser } from "./support/Sandboxes.js"

const rowJsonOf = (table: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ j: string }>`SELECT row_to_json(t)::text AS j FROM ${sql(table)} t WHERE id = ${id}`.pipe(Effect.orDie),
      (rows) => rows[0]?.j
    ))

describe("operator plane (D1)", () => {
  it.live("pilot application, approval, sandbox ready, first key shown once and stored hashed", () =>
    Effect.gen(function*() {
      const submitted = yield* operator("POST", "/pilot-applications", {
        organization_name: "Initech",
        contact_email: "ops@initech.test"
      })
      expect(submitted.status, submitted.text).toBe(201)
      expect(submitted.body.status).toBe("submitted")
      expect(typeof submitted.body.id).toBe("string")
      expect(submitted.body.id.length).toBeGreaterThan(0)

      const approved = yield* operator("POST", `/pilot-applications/${submitted.body.id}/approve`)
      expect(approved.status, approved.text).toBe(200)
      expect(approved.body.environment).toBe("sandbox")
      expect(approved.body.tenant_id).toMatch(/^ten_/)
      const tenantId: string = approved.body.tenant_id

      const again = yield* operator("POST", `/pilot-applications/${submitted.body.id}/approve`)
      expect(again.status, again.text).toBe(200)
      expect(again.body.tenant_id).toBe(tenantId)
      expect(again.body.environment).toBe("sandbox")
      const sql = yield* SqlClient.SqlClient
      const tenants = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM tenants`.pipe(Effect.orDie)
      expect(tenants[0]!.n).toBe(1)

      const unknown = yield* operator("POST", "/pilot-applications/pilot_doesnotexist/approve")
      expect(unknown.status, unknown.text).toBe(404)

      const key = yield* operator("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, { name: "first" })
      expect(key.status, key.text).toBe(201)
      const secret: string = key.body.secret
      expect(secret.startsWith("sk_test_")).toBe(true)
      expect(KeySecrets.looksLikeKey(secret)).toBe(true)
      expect(key.body.kind).toBe("quickstart")
      expect(key.body.status).toBe("active")

      const P = `/v1/tenants/${tenantId}/environments/sandbox`
      const env = expectSingle(yield* request("GET", P, { key: secret }))
      expect(env.state).toBe("ready")
      expect(env.name).toBe("sandbox")
      expect(env.tenant_id).toBe(tenantId)

      // No column of the stored key holds the secret, in any encoding; secret_hash is its SHA-256.
      const row = (yield* rowJsonOf("api_keys", key.body.id))!
      expect(row).toBeDefined()
      expect(row).not.toContain(secret)
      expect(row).not.toContain(secret.slice(8)) // the random part
      expect(row.toLowerCase()).not.toContain(Buffer.from(secret, "utf8").toString("hex"))
      const [stored] = yield* sql<{ secret_hash: Uint8Array }>`SELECT secret_hash FROM api_keys WHERE id = ${key.body.id}`
        .pipe(Effect.orDie)
      const hash = Buffer.from(stored!.secret_hash)
      expect(hash.toString("utf8")).not.toBe(secret)
      expect(hash.toString("utf8")).not.toContain(secret.slice(8))
      expect(hash.equals(KeySecrets.hash(secret))).toBe(true)
      const columns = yield* sql<{ column_name: string }>`
        SELECT column_name FROM information_schema.columns WHERE table_name = 'api_keys'`.pipe(Effect.orDie)
      expect(columns.map((c) => c.column_name)).not.toContain("secret")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("operator keys: unknown scope 400; the operator token is not a service key", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const bad = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, {
        name: "bad",
        scopes: ["users:read", "users:fly"]
      })
      expect(bad.status, bad.text).toBe(400)
      const console = yield* createKey(sb.tenantId, ["users:read"], "console")
      expect(console.scopes).toEqual(["users:read"])
      expect(console.secret.startsWith("sk_test_")).toBe(true)
      const unknownTenant = yield* operator("POST", `/tenants/ten_nope/environments/sandbox/api-keys`, { name: "x" })
      expect(unknownTenant.status, unknownTenant.text).toBe(404)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("tenants", () => {
  it.live("list, get, update, delete with a deletion job to poll", () =>
    Effect.gen(function*() {
      const a = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Alpha")
      const b = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Beta")

      const list = expectList(yield* request("GET", "/v1/tenants", { key: a.key }))
      expect(list.items.map((t) => t.id)).toEqual([a.tenantId])
      expect(list.next_cursor).toBeNull()

      // D6 holds on this one-item list too: a malformed or foreign cursor is 400 invalid_cursor.
      const users = expectList(yield* request("GET", `${a.P}/users?limit=1`, { key: a.key }))
      expect(users.next_cursor).toBeNull()
      yield* postUser(a.P, a.key, { external_id: "c1", display_name: "C1" })
      yield* postUser(a.P, a.key, { external_id: "c2", display_name: "C2" })
      const foreign = expectList(yield* request("GET", `${a.P}/users?limit=1`, { key: a.key })).next_cursor!
      for (const bad of ["garbage", foreign]) {
        expectError(
          yield* request("GET", `/v1/tenants?cursor=${encodeURIComponent(bad)}`, { key: a.key }),
          400,
          "invalid_request",
          "invalid_cursor"
        )
        expectError(
          yield* request("GET", `/v1/tenants/${a.tenantId}/environments?cursor=${encodeURIComponent(bad)}`, { key: a.key }),
          400,
          "invalid_request",
          "invalid_cursor"
        )
      }
      expectError(yield* request("GET", "/v1/tenants?limit=0", { key: a.key }), 400, "invalid_request")
      expect(expectList(yield* request("GET", "/v1/tenants?limit=1", { key: a.key })).items).toHaveLength(1)

      const tenant = expectSingle(yield* request("GET", `/v1/tenants/${a.tenantId}`, { key: a.key }))
      expect(tenant).toMatchObject({ id: a.tenantId, object: "tenant", name: "Alpha", status: "active" })

      // Another tenant is 404, never 403.
      expectError(yield* request("GET", `/v1/tenants/${b.tenantId}`, { key: a.key }), 404, "not_found")

      const updated = expectSingle(
        yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: a.key, body: { name: "Alpha Renamed" } })
      )
      expect(updated.name).toBe("Alpha Renamed")
      const reread = expectSingle(yield* request("GET", `/v1/tenants/${a.tenantId}`, { key: a.key }))
      expect(reread.name).toBe("Alpha Renamed")

      expectError(
        yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: a.key, body: { name: "" } }),
        400,
        "invalid_request"
      )
      expectError(yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: a.key, body: {} }), 400, "invalid_request")
      // tenants:write is needed: the first key (quickstart abilities) only reads.
      const first = yield* createKey(a.tenantId)
      expectError(
        yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: first.secret, body: { name: "Nope" } }),
        403,
        "permission_error",
        "missing_scope"
      )
      const unchanged = expectSingle(yield* request("GET", `/v1/tenants/${a.tenantId}`, { key: a.key }))
      expect(unchanged.name).toBe("Alpha Renamed")

      const deleted = yield* request("DELETE", `/v1/tenants/${a.tenantId}`, { key: a.key })
      const job = expectSingle(deleted, 202)
      expect(job).toMatchObject({
        object: "deletion_job",
        resource_type: "tenant",
        resource_id: a.tenantId,
        state: "queued",
        completed_at: null
      })
      expect(job.id).toMatch(/^dj_/)
      expect(deleted.headers.get("location")).toBe(`${a.P}/deletion-jobs/${job.id}`)

      // D19: deleting the tenant ends its keys' access at once, from the 202 on; the job is there for operators.
      for (const [method, path] of [["GET", deleted.headers.get("location")!], ["GET", `/v1/tenants/${a.tenantId}`]] as const) {
        expectError(yield* request(method, path, { key: a.key }), 401, "authentication_error", "key_revoked")
      }
      expectError(
        yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: a.key, body: { name: "Late" } }),
        401,
        "authentication_error",
        "key_revoked"
      )
      const sql = yield* SqlClient.SqlClient
      const [stored] = yield* sql<{ state: string; status: string }>`
        SELECT j.state, t.status FROM deletion_jobs j JOIN tenants t ON t.id = j.resource_id WHERE j.id = ${job.id}`.pipe(Effect.orDie)
      expect(stored).toEqual({ state: "queued", status: "deleting" })
      // The other tenant is untouched and cannot see the job.
      expectError(yield* request("GET", `${b.P}/deletion-jobs/${job.id}`, { key: b.key }), 404, "not_found")
      const other = expectSingle(yield* request("GET", `/v1/tenants/${b.tenantId}`, { key: b.key }))
      expect(other.status).toBe("active")
    }).pipe(Effect.provide(makeTestApp())))
})

describe("environments", () => {
  it.live("list own environment only, get its state, delete with a deletion job", () =>
    Effect.gen(function*() {
      const a = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Alpha")
      const b = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Beta")

      const list = expectList(yield* request("GET", `/v1/tenants/${a.tenantId}/environments`, { key: a.key }))
      expect(list.items).toHaveLength(1)
      expect(list.items[0]).toMatchObject({ object: "environment", tenant_id: a.tenantId, name: "sandbox", state: "ready" })
      expect(list.next_cursor).toBeNull()
      expectError(yield* request("GET", `/v1/tenants/${b.tenantId}/environments`, { key: a.key }), 404, "not_found")

      const env = expectSingle(yield* request("GET", a.P, { key: a.key }))
      expect(env).toMatchObject({ id: list.items[0].id, object: "environment", name: "sandbox", state: "ready" })
      expectError(yield* request("GET", b.P, { key: a.key }), 404, "not_found")
      expectError(
        yield* request("GET", `/v1/tenants/${a.tenantId}/environments/production`, { key: a.key }),
        404,
        "not_found"
      )
      expectError(
        yield* request("GET", `/v1/tenants/${a.tenantId}/environments/staging`, { key: a.key }),
        400,
        "invalid_request"
      )

      const deleted = yield* request("DELETE", a.P, { key: a.key })
      const job = expectSingle(deleted, 202)
      expect(job).toMatchObject({ object: "deletion_job", resource_type: "environment", resource_id: env.id, state: "queued" })
      expect(deleted.headers.get("location")).toBe(`${a.P}/deletion-jobs/${job.id}`)
      // D19: the environment's keys are refused from the 202 on
      expectError(yield* request("GET", deleted.headers.get("location")!, { key: a.key }), 401, "authentication_error", "key_revoked")
      expectError(yield* request("GET", a.P, { key: a.key }), 401, "authentication_error", "key_revoked")

      // b is untouched.
      expect(expectSingle(yield* request("GET", b.P, { key: b.key })).state).toBe("ready")
    }).pipe(Effect.provide(makeTestApp())))
})
