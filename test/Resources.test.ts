/**
 * The platform plane's resources end to end over HTTP (contract parts 2, 3.2, 4, 8; D1, D2, D3, D6):
 * operator plane, tenants, environments, users (paging, deletion, purge, tombstones), service
 * actors, API keys and path identifiers. Purge and tombstone windows run on TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, TestClock } from "effect"
import { randomBytes } from "node:crypto"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp } from "./support/App.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { ALL_MANAGEMENT_SCOPES, createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { eventually, settle } from "./support/Waiting.js"

const MGMT = [...ALL_MANAGEMENT_SCOPES]

/**
 * For suites that move TestClock by months: TestClock wakes every periodic sweep in turn, and each
 * wake does real database IO, so 90 days of the default 60 s sweeps (and 150 s cell sweeps) would
 * take far longer than a test may. Wider intervals keep the purge within its 24 h bound
 * (PURGE_DELAY_SECONDS 1 h + one 6 h sweep) and the same code paths.
 */
const LONG_WINDOWS = { sweepIntervalSeconds: 6 * 3600, cellIdleTimeoutSeconds: 24 * 3600 }

const createUser = (P: string, key: string, body: Record<string, unknown>) =>
  request("POST", `${P}/users`, { key, body })

/** Creates users one by one (sequential requests: each id is newer than the one before). */
const createUsers = (P: string, key: string, prefix: string, n: number) =>
  Effect.gen(function*() {
    const ids: Array<string> = []
    for (let i = 0; i < n; i++) {
      const res = yield* createUser(P, key, { external_id: `${prefix}-${i}`, display_name: `User ${prefix} ${i}` })
      ids.push(expectSingle(res, 201).id)
    }
    return ids
  })

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
      const a = yield* provisionSandbox(MGMT, "Alpha")
      const b = yield* provisionSandbox(MGMT, "Beta")

      const list = expectList(yield* request("GET", "/v1/tenants", { key: a.key }))
      expect(list.items.map((t) => t.id)).toEqual([a.tenantId])
      expect(list.next_cursor).toBeNull()

      // D6 holds on this one-item list too: a malformed or foreign cursor is 400 invalid_cursor.
      const users = expectList(yield* request("GET", `${a.P}/users?limit=1`, { key: a.key }))
      expect(users.next_cursor).toBeNull()
      yield* createUser(a.P, a.key, { external_id: "c1", display_name: "C1" })
      yield* createUser(a.P, a.key, { external_id: "c2", display_name: "C2" })
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

      const polled = expectSingle(yield* request("GET", deleted.headers.get("location")!, { key: a.key }))
      expect(polled.id).toBe(job.id)
      expect(polled.state).toBe("queued")

      // Being deleted: readable (status deleting), but read-only.
      const deleting = expectSingle(yield* request("GET", `/v1/tenants/${a.tenantId}`, { key: a.key }))
      expect(deleting.status).toBe("deleting")
      expectError(
        yield* request("PATCH", `/v1/tenants/${a.tenantId}`, { key: a.key, body: { name: "Late" } }),
        409,
        "conflict"
      )
      // The other tenant is untouched and cannot see the job.
      expectError(yield* request("GET", `${b.P}/deletion-jobs/${job.id}`, { key: b.key }), 404, "not_found")
      const other = expectSingle(yield* request("GET", `/v1/tenants/${b.tenantId}`, { key: b.key }))
      expect(other.status).toBe("active")
    }).pipe(Effect.provide(makeTestApp())))
})

describe("environments", () => {
  it.live("list own environment only, get its state, delete with a deletion job", () =>
    Effect.gen(function*() {
      const a = yield* provisionSandbox(MGMT, "Alpha")
      const b = yield* provisionSandbox(MGMT, "Beta")

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
      const polled = expectSingle(yield* request("GET", deleted.headers.get("location")!, { key: a.key }))
      expect(polled.state).toBe("queued")
      const deleting = expectSingle(yield* request("GET", a.P, { key: a.key }))
      expect(deleting.state).toBe("deleting")

      // b is untouched.
      expect(expectSingle(yield* request("GET", b.P, { key: b.key })).state).toBe("ready")
    }).pipe(Effect.provide(makeTestApp())))
})

describe("users", () => {
  it.live("create, duplicate, get, update", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(MGMT)
      const created = yield* createUser(sb.P, sb.key, { external_id: "cust-1", display_name: "Ada" })
      const user = expectSingle(created, 201)
      expect(user.id).toMatch(/^user_/)
      expect(user).toMatchObject({ object: "user", external_id: "cust-1", display_name: "Ada", email: null })

      expectError(
        yield* createUser(sb.P, sb.key, { external_id: "cust-1", display_name: "Other Ada" }),
        409,
        "conflict",
        "already_exists"
      )
      // Concurrent creates of one external_id: exactly one 201, the rest 409 already_exists.
      const racing = yield* Effect.all(
        Array.from({ length: 6 }, () => createUser(sb.P, sb.key, { external_id: "race", display_name: "Race" })),
        { concurrency: "unbounded" }
      )
      expect(racing.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409])
      for (const r of racing.filter((r) => r.status === 409)) expectError(r, 409, "conflict", "already_exists")
      expectError(yield* createUser(sb.P, sb.key, { external_id: "cust-2" }), 400, "invalid_request")
      expectError(
        yield* createUser(sb.P, sb.key, { external_id: "cust-2", display_name: "B", email: "not-an-email" }),
        400,
        "invalid_request"
      )

      const got = expectSingle(yield* request("GET", `${sb.P}/users/${user.id}`, { key: sb.key }))
      expect(got).toEqual(user)

      const renamed = expectSingle(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, {
          key: sb.key,
          body: { display_name: "Ada L.", email: "ada@example.test" }
        })
      )
      expect(renamed).toMatchObject({ id: user.id, display_name: "Ada L.", email: "ada@example.test", external_id: "cust-1" })

      const onlyName = expectSingle(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { display_name: "Ada Lovelace" } })
      )
      expect(onlyName).toMatchObject({ display_name: "Ada Lovelace", email: "ada@example.test" })

      const cleared = expectSingle(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { email: null } })
      )
      expect(cleared).toMatchObject({ display_name: "Ada Lovelace", email: null })
      const reread = expectSingle(yield* request("GET", `${sb.P}/users/${user.id}`, { key: sb.key }))
      expect(reread).toMatchObject({ display_name: "Ada Lovelace", email: null })

      expectError(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: {} }),
        400,
        "invalid_request"
      )
      expectError(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { display_name: "" } }),
        400,
        "invalid_request"
      )
      expectError(
        yield* request("PATCH", `${sb.P}/users/user_doesnotexist`, { key: sb.key, body: { display_name: "X" } }),
        404,
        "not_found"
      )

      // Another tenant's user is 404.
      const other = yield* provisionSandbox(MGMT, "Other")
      expectError(yield* request("GET", `${other.P}/users/${user.id}`, { key: other.key }), 404, "not_found")
      // users:write is needed to create.
      const reader = yield* createKey(sb.tenantId, ["users:read"])
      expectError(
        yield* createUser(sb.P, reader.secret, { external_id: "cust-9", display_name: "R" }),
        403,
        "permission_error",
        "missing_scope"
      )
    }).pipe(Effect.provide(makeTestApp())))

  it.live("listUser pages newest first with stable cursors; cursors are bound to list and cell", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(MGMT, "Alpha")
      const ids = yield* createUsers(sb.P, sb.key, "u", 7)
      const newestFirst = [...ids].reverse()

      // Plain paging: 3, 3, 1.
      const seen: Array<string> = []
      const sizes: Array<number> = []
      let cursor: string | null = null
      let pages = 0
      do {
        const q: string = cursor === null ? "?limit=3" : `?limit=3&cursor=${encodeURIComponent(cursor)}`
        const page = expectList(yield* request("GET", `${sb.P}/users${q}`, { key: sb.key }))
        sizes.push(page.items.length)
        seen.push(...page.items.map((u) => u.id))
        cursor = page.next_cursor
        pages++
      } while (cursor !== null && pages < 10)
      expect(sizes).toEqual([3, 3, 1])
      expect(seen).toEqual(newestFirst)

      // Default page holds all 7, newest first.
      const all = expectList(yield* request("GET", `${sb.P}/users`, { key: sb.key }))
      expect(all.items.map((u) => u.id)).toEqual(newestFirst)
      expect(all.next_cursor).toBeNull()

      // Inserts between page reads never duplicate or skip older users.
      const p1 = expectList(yield* request("GET", `${sb.P}/users?limit=3`, { key: sb.key }))
      yield* createUsers(sb.P, sb.key, "mid1", 2)
      const p2 = expectList(
        yield* request("GET", `${sb.P}/users?limit=3&cursor=${encodeURIComponent(p1.next_cursor!)}`, { key: sb.key })
      )
      yield* createUsers(sb.P, sb.key, "mid2", 3)
      const p3 = expectList(
        yield* request("GET", `${sb.P}/users?limit=3&cursor=${encodeURIComponent(p2.next_cursor!)}`, { key: sb.key })
      )
      expect(p3.next_cursor).toBeNull()
      const walked = [...p1.items, ...p2.items, ...p3.items].map((u) => u.id)
      expect(walked).toEqual(newestFirst)
      expect(new Set(walked).size).toBe(walked.length)

      // A users cursor on the service-actors list: 400 invalid_cursor.
      expectError(
        yield* request("GET", `${sb.P}/service-actors?cursor=${encodeURIComponent(p1.next_cursor!)}`, { key: sb.key }),
        400,
        "invalid_request",
        "invalid_cursor"
      )
      // Tenant A's cursor used by tenant B (on B's own users list): 400 invalid_cursor.
      const b = yield* provisionSandbox(MGMT, "Beta")
      yield* createUsers(b.P, b.key, "b", 2)
      expectError(
        yield* request("GET", `${b.P}/users?cursor=${encodeURIComponent(p1.next_cursor!)}`, { key: b.key }),
        400,
        "invalid_request",
        "invalid_cursor"
      )
      // Malformed cursors and limits.
      for (const bad of ["garbage", "eyJ4IjoxfQ", ""]) {
        const res = yield* request("GET", `${sb.P}/users?cursor=${encodeURIComponent(bad)}`, { key: sb.key })
        expectError(res, 400, "invalid_request", "invalid_cursor")
      }
      for (const bad of ["0", "101", "1.5", "abc", "-1"]) {
        expectError(yield* request("GET", `${sb.P}/users?limit=${bad}`, { key: sb.key }), 400, "invalid_request")
      }
      const hundred = expectList(yield* request("GET", `${sb.P}/users?limit=100`, { key: sb.key }))
      expect(hundred.items).toHaveLength(12)

      // The default page is 50: add 45 older users directly, then page without a limit.
      const sql = yield* SqlClient.SqlClient
      for (let i = 0; i < 45; i++) {
        const id = `user_0000000000old${String(i).padStart(10, "0")}`
        yield* sql`INSERT INTO users (id, tenant_id, environment, external_id, display_name, status, created_at, updated_at)
                   VALUES (${id}, ${sb.tenantId}, 'sandbox', ${`old-${i}`}, ${`Old ${i}`}, 'active', now(), now())`
          .pipe(Effect.orDie)
      }
      const d1 = expectList(yield* request("GET", `${sb.P}/users`, { key: sb.key }))
      expect(d1.items).toHaveLength(50)
      expect(d1.next_cursor).not.toBeNull()
      const d2 = expectList(yield* request("GET", `${sb.P}/users?cursor=${encodeURIComponent(d1.next_cursor!)}`, { key: sb.key }))
      expect(d2.items).toHaveLength(7)
      expect(d2.next_cursor).toBeNull()
      const everyone = [...d1.items, ...d2.items].map((u) => u.id)
      expect(new Set(everyone).size).toBe(57)
      expect(everyone).toEqual([...everyone].sort().reverse())
    }).pipe(Effect.provide(makeTestApp())))

  it.live("deleteUser denies access at once, revokes bound keys, tombstones the external_id", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(MGMT)
      const sql = yield* SqlClient.SqlClient
      const user = expectSingle(
        yield* createUser(sb.P, sb.key, { external_id: "gone-1", display_name: "Bye", email: "bye@example.test" }),
        201
      )
      const keep = expectSingle(yield* createUser(sb.P, sb.key, { external_id: "keep-1", display_name: "Stay" }), 201)

      // A key bound to the user (derived authority).
      const secret = KeySecrets.generate("sandbox")
      const boundKeyId = `key_bound_${randomBytes(6).toString("hex")}`
      yield* sql`
        INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, user_id, parent_key_id, created_at)
        VALUES (${boundKeyId}, ${sb.tenantId}, 'sandbox', 'user lease', 'derived', ${KeySecrets.prefixOf(secret)},
                ${KeySecrets.hash(secret)}, ${["users:read"]}::text[], ${user.id}, ${sb.keyId}, now())`.pipe(Effect.orDie)
      // ...and a lease derived from that key (no user_id of its own): derived authority too.
      const leaseSecret = KeySecrets.generate("sandbox")
      yield* sql`
        INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, parent_key_id, created_at)
        VALUES (${`key_lease_${randomBytes(6).toString("hex")}`}, ${sb.tenantId}, 'sandbox', 'lease of user lease', 'derived',
                ${KeySecrets.prefixOf(leaseSecret)}, ${KeySecrets.hash(leaseSecret)}, ${["users:read"]}::text[],
                ${boundKeyId}, now())`.pipe(Effect.orDie)
      expectSingle(yield* request("GET", `${sb.P}/users/${keep.id}`, { key: secret }))
      expectSingle(yield* request("GET", `${sb.P}/users/${keep.id}`, { key: leaseSecret }))

      const deleted = yield* request("DELETE", `${sb.P}/users/${user.id}`, { key: sb.key })
      const job = expectSingle(deleted, 202)
      expect(job).toMatchObject({
        object: "deletion_job",
        resource_type: "user",
        resource_id: user.id,
        state: "queued",
        completed_at: null
      })
      expect(deleted.headers.get("location")).toBe(`${sb.P}/deletion-jobs/${job.id}`)
      expect(expectSingle(yield* request("GET", deleted.headers.get("location")!, { key: sb.key })).state).toBe("queued")

      expectError(yield* request("GET", `${sb.P}/users/${user.id}`, { key: sb.key }), 410, "gone", "tombstoned")
      const list = expectList(yield* request("GET", `${sb.P}/users`, { key: sb.key }))
      expect(list.items.map((u) => u.id)).toEqual([keep.id])
      expectError(
        yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { display_name: "Back" } }),
        410,
        "gone",
        "tombstoned"
      )
      expectError(yield* request("DELETE", `${sb.P}/users/${user.id}`, { key: sb.key }), 410, "gone", "tombstoned")

      // The bound key is revoked at once.
      expectError(yield* request("GET", `${sb.P}/users/${keep.id}`, { key: secret }), 401, "authentication_error", "key_revoked")
      expectError(
        yield* request("GET", `${sb.P}/users/${keep.id}`, { key: leaseSecret }),
        401,
        "authentication_error",
        "key_revoked"
      )
      // The caller's own key still works.
      expectSingle(yield* request("GET", `${sb.P}/users/${keep.id}`, { key: sb.key }))

      // The external_id cannot be reused while tombstoned.
      expectError(
        yield* createUser(sb.P, sb.key, { external_id: "gone-1", display_name: "Again" }),
        410,
        "gone",
        "tombstoned"
      )
      // Concurrent deletes of one user: one 202 (one job), the rest 410.
      const twin = expectSingle(yield* createUser(sb.P, sb.key, { external_id: "twin", display_name: "Twin" }), 201)
      const racing = yield* Effect.all(
        Array.from({ length: 6 }, () => request("DELETE", `${sb.P}/users/${twin.id}`, { key: sb.key })),
        { concurrency: "unbounded" }
      )
      expect(racing.map((r) => r.status).sort()).toEqual([202, 410, 410, 410, 410, 410])
      const twinJobs = yield* sql`SELECT id FROM deletion_jobs WHERE resource_id = ${twin.id}`.pipe(Effect.orDie)
      expect(twinJobs).toHaveLength(1)
      yield* sql`DELETE FROM tombstones WHERE resource_id = ${twin.id}`.pipe(Effect.orDie)

      // The tombstone holds no plaintext external_id.
      const tombs = yield* sql<{ j: string }>`SELECT row_to_json(t)::text AS j FROM tombstones t`.pipe(Effect.orDie)
      expect(tombs).toHaveLength(1)
      expect(tombs[0]!.j).not.toContain("gone-1")
    }).pipe(Effect.provide(makeTestApp())))

  it.effect("deleteUser purge after 24 h on TestClock; the tombstone lapses after 90 days", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const sb = yield* provisionSandbox(MGMT)
        const createBody = { external_id: "purge-me", display_name: "Purge Me", email: "p@example.test" }
        const user = expectSingle(
          yield* request("POST", `${sb.P}/users`, { key: sb.key, body: createBody, idempotencyKey: "create-purge-me" }),
          201
        )
        expectSingle(
          yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { display_name: "Purge Me Too" } })
        )
        const bystander = expectSingle(
          yield* createUser(sb.P, sb.key, { external_id: "stays", display_name: "Stays Here", email: "s@example.test" }),
          201
        )
        const deleted = yield* request("DELETE", `${sb.P}/users/${user.id}`, { key: sb.key })
        const job = expectSingle(deleted, 202)
        const location = deleted.headers.get("location")!
        const pollJob = Effect.map(request("GET", location, { key: sb.key }), (r) => expectSingle(r))

        // Nothing is purged before the window.
        yield* settle
        expect((yield* pollJob).state).toBe("queued")
        const [before] = yield* sql<{ external_id: string | null }>`SELECT external_id FROM users WHERE id = ${user.id}`
          .pipe(Effect.orDie)
        expect(before!.external_id).toBe("purge-me")

        yield* TestClock.adjust("24 hours")
        const done = yield* eventually(pollJob, (j) => j.state === "succeeded")
        expect(done.state).toBe("succeeded")
        expect(done.completed_at).not.toBeNull()
        expect(Date.parse(done.completed_at) - Date.parse(job.created_at)).toBeLessThanOrEqual(
          Duration.toMillis("24 hours")
        )
        const [row] = yield* sql<{ external_id: string | null; display_name: string | null; email: string | null }>`
          SELECT external_id, display_name, email FROM users WHERE id = ${user.id}`.pipe(Effect.orDie)
        expect(row).toEqual({ external_id: null, display_name: null, email: null })
        expectError(yield* request("GET", `${sb.P}/users/${user.id}`, { key: sb.key }), 410, "gone", "tombstoned")
        // No stored idempotent response keeps the purged data (they are live data too)...
        const stored = yield* sql<{ body: string | null }>`SELECT body FROM idempotency_keys`.pipe(Effect.orDie)
        for (const { body } of stored) {
          for (const personal of ["purge-me", "Purge Me", "p@example.test"]) expect(body ?? "").not.toContain(personal)
        }
        // ...while other users' records are kept, and so is the deletion's own replay.
        expect(stored.some(({ body }) => (body ?? "").includes("s@example.test"))).toBe(true)
        expect(stored.some(({ body }) => (body ?? "").includes(job.id))).toBe(true)
        expect(expectSingle(yield* request("GET", `${sb.P}/users/${bystander.id}`, { key: sb.key })).email).toBe(
          "s@example.test"
        )
        // Retrying the original create does not hand the purged record back.
        const retried = yield* request("POST", `${sb.P}/users`, { key: sb.key, body: createBody, idempotencyKey: "create-purge-me" })
        expect(retried.text).not.toContain("p@example.test")
        expectError(retried, 410, "gone", "tombstoned")

        // Still tombstoned within 90 days.
        expectError(
          yield* createUser(sb.P, sb.key, { external_id: "purge-me", display_name: "Again" }),
          410,
          "gone",
          "tombstoned"
        )

        yield* TestClock.adjust("90 days")
        const tombstones = sql<{ n: number }>`SELECT count(*)::int AS n FROM tombstones`.pipe(
          Effect.orDie,
          Effect.map((r) => r[0]!.n)
        )
        expect(yield* eventually(tombstones, (n) => n === 0)).toBe(0)
        const recreated = expectSingle(
          yield* createUser(sb.P, sb.key, { external_id: "purge-me", display_name: "Reborn" }),
          201
        )
        expect(recreated.id).not.toBe(user.id)
        expect(recreated.external_id).toBe("purge-me")
      }).pipe(Effect.provide(makeTestApp(LONG_WINDOWS)))
    }), { timeout: 180_000 })

  it.effect("deleteTenant purge after 24 h on TestClock: keys revoked, environment deleted", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const sb = yield* provisionSandbox(MGMT)
        const other = yield* provisionSandbox(MGMT, "Bystander")
        const first = yield* createKey(sb.tenantId)
        const user = expectSingle(
          yield* createUser(sb.P, sb.key, { external_id: "t-user", display_name: "T User", email: "t@example.test" }),
          201
        )
        expectSingle(yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "bot" } }), 201)

        const deleted = yield* request("DELETE", `/v1/tenants/${sb.tenantId}`, { key: sb.key })
        const job = expectSingle(deleted, 202)
        expect(expectSingle(yield* request("GET", deleted.headers.get("location")!, { key: sb.key })).state).toBe("queued")

        const jobState = sql<{ state: string; completed_at: Date | null }>`
          SELECT state, completed_at FROM deletion_jobs WHERE id = ${job.id}`.pipe(Effect.orDie, Effect.map((r) => r[0]!))
        yield* TestClock.adjust("24 hours")
        const done = yield* eventually(jobState, (j) => j.state === "succeeded")
        expect(done.state).toBe("succeeded")
        expect(done.completed_at).not.toBeNull()

        // Every key of the tenant is refused on the next request.
        expectError(yield* request("GET", "/v1/tenants", { key: sb.key }), 401, "authentication_error")
        expectError(yield* request("GET", sb.P, { key: first.secret }), 401, "authentication_error")
        const keys = yield* sql<{ revoked_at: Date | null }>`SELECT revoked_at FROM api_keys WHERE tenant_id = ${sb.tenantId}`
          .pipe(Effect.orDie)
        expect(keys.length).toBe(2)
        expect(keys.every((k) => k.revoked_at !== null)).toBe(true)
        const [env] = yield* sql<{ state: string }>`SELECT state FROM environments WHERE tenant_id = ${sb.tenantId}`
          .pipe(Effect.orDie)
        expect(env!.state).toBe("deleted")
        const [tenant] = yield* sql<{ status: string }>`SELECT status FROM tenants WHERE id = ${sb.tenantId}`
          .pipe(Effect.orDie)
        expect(tenant!.status).toBe("deleted")
        const [u] = yield* sql<{ external_id: string | null; email: string | null }>`
          SELECT external_id, email FROM users WHERE id = ${user.id}`.pipe(Effect.orDie)
        expect(u).toEqual({ external_id: null, email: null })
        const actors = yield* sql`SELECT id FROM service_actors WHERE tenant_id = ${sb.tenantId}`.pipe(Effect.orDie)
        expect(actors).toHaveLength(0)
        // The operator cannot mint keys for a deleted tenant.
        const late = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "late" })
        expect(late.status, late.text).toBe(404)

        // The bystander is untouched.
        expect(expectSingle(yield* request("GET", other.P, { key: other.key })).state).toBe("ready")
      }).pipe(Effect.provide(makeTestApp()))
    }), { timeout: 180_000 })
})

describe("service actors", () => {
  it.live("create, get, list; another tenant's service actor is 404", () =>
    Effect.gen(function*() {
      const a = yield* provisionSandbox(MGMT, "Alpha")
      const b = yield* provisionSandbox(MGMT, "Beta")
      // Each sandbox has its quickstart's service actor from provisioning (the oldest, listed last).
      const quickstartActor = (tenantId: string) =>
        Effect.map(
          operator("GET", `/tenants/${tenantId}/environments/sandbox/quickstart`),
          (r) => r.body.service_actor_id as string
        )
      const qsA = yield* quickstartActor(a.tenantId)
      const qsB = yield* quickstartActor(b.tenantId)
      const created = expectSingle(
        yield* request("POST", `${a.P}/service-actors`, { key: a.key, body: { name: "nightly-sync" } }),
        201
      )
      expect(created.id).toMatch(/^sa_/)
      expect(created).toMatchObject({ object: "service_actor", name: "nightly-sync" })

      const got = expectSingle(yield* request("GET", `${a.P}/service-actors/${created.id}`, { key: a.key }))
      expect(got).toEqual(created)

      const second = expectSingle(
        yield* request("POST", `${a.P}/service-actors`, { key: a.key, body: { name: "billing" } }),
        201
      )
      const list = expectList(yield* request("GET", `${a.P}/service-actors`, { key: a.key }))
      expect(list.items.map((s) => s.id)).toEqual([second.id, created.id, qsA])
      const paged = expectList(yield* request("GET", `${a.P}/service-actors?limit=1`, { key: a.key }))
      expect(paged.items.map((s) => s.id)).toEqual([second.id])
      const rest = expectList(
        yield* request("GET", `${a.P}/service-actors?limit=1&cursor=${encodeURIComponent(paged.next_cursor!)}`, {
          key: a.key
        })
      )
      expect(rest.items.map((s) => s.id)).toEqual([created.id])
      const last = expectList(
        yield* request("GET", `${a.P}/service-actors?limit=1&cursor=${encodeURIComponent(rest.next_cursor!)}`, {
          key: a.key
        })
      )
      expect(last.items.map((s) => s.id)).toEqual([qsA])
      expect(last.next_cursor).toBeNull()

      expectError(yield* request("GET", `${b.P}/service-actors/${created.id}`, { key: b.key }), 404, "not_found")
      expectError(yield* request("GET", `${a.P}/service-actors/${created.id}`, { key: b.key }), 404, "not_found")
      expect(expectList(yield* request("GET", `${b.P}/service-actors`, { key: b.key })).items.map((s) => s.id))
        .toEqual([qsB])
      expectError(
        yield* request("POST", `${a.P}/service-actors`, { key: a.key, body: { name: "" } }),
        400,
        "invalid_request"
      )
    }).pipe(Effect.provide(makeTestApp())))
})

describe("API keys", () => {
  it.live("list and get never show a secret or hash; revoke is immediate and repeatable", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(MGMT)
      const first = yield* createKey(sb.tenantId)
      const narrow = yield* createKey(sb.tenantId, ["users:read"], "narrow")

      const list = expectList(yield* request("GET", `${sb.P}/api-keys`, { key: sb.key }))
      expect(list.items.map((k) => k.id).sort()).toEqual([sb.keyId, first.id, narrow.id].sort())
      for (const item of list.items) {
        expect(item.object).toBe("api_key")
        expect(Object.keys(item).filter((k) => /secret|hash/i.test(k))).toEqual([])
      }
      const listText = JSON.stringify(list)
      for (const s of [sb.key, first.secret, narrow.secret]) {
        expect(listText).not.toContain(s)
        expect(listText).not.toContain(KeySecrets.hash(s).toString("hex"))
      }

      const got = yield* request("GET", `${sb.P}/api-keys/${narrow.id}`, { key: sb.key })
      const key = expectSingle(got)
      expect(key).toMatchObject({ id: narrow.id, status: "active", revoked_at: null, scopes: ["users:read"] })
      expect(Object.keys(key).filter((k) => /secret|hash/i.test(k))).toEqual([])
      expect(got.text).not.toContain(narrow.secret)
      expect(key.prefix.length).toBeLessThan(narrow.secret.length)

      // keys:read is needed.
      expectError(yield* request("GET", `${sb.P}/api-keys`, { key: narrow.secret }), 403, "permission_error", "missing_scope")

      // The narrow key works until it is revoked.
      expectList(yield* request("GET", `${sb.P}/users`, { key: narrow.secret }))

      // Paging the key list: one at a time, no duplicates, newest first; its cursor is its own.
      const walked: Array<string> = []
      let cursor: string | null = null
      for (let i = 0; i < 5; i++) {
        const q: string = cursor === null ? "?limit=1" : `?limit=1&cursor=${encodeURIComponent(cursor)}`
        const page = expectList(yield* request("GET", `${sb.P}/api-keys${q}`, { key: sb.key }))
        walked.push(...page.items.map((k) => k.id))
        if ((cursor = page.next_cursor) === null) break
        expectError(
          yield* request("GET", `${sb.P}/users?cursor=${encodeURIComponent(cursor)}`, { key: sb.key }),
          400,
          "invalid_request",
          "invalid_cursor"
        )
      }
      expect(walked).toEqual(list.items.map((k) => k.id))
      expect(walked).toEqual([narrow.id, first.id, sb.keyId])

      // A lease derived from the narrow key: revoking the parent invalidates it (contract 4 rule 5).
      const sql = yield* SqlClient.SqlClient
      const leaseSecret = KeySecrets.generate("sandbox")
      yield* sql`
        INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, parent_key_id, created_at)
        VALUES (${`key_lease_${randomBytes(6).toString("hex")}`}, ${sb.tenantId}, 'sandbox', 'lease', 'derived',
                ${KeySecrets.prefixOf(leaseSecret)}, ${KeySecrets.hash(leaseSecret)}, ${["users:read"]}::text[],
                ${narrow.id}, now())`.pipe(Effect.orDie)
      expectList(yield* request("GET", `${sb.P}/users`, { key: leaseSecret }))

      const revoked = expectSingle(yield* request("POST", `${sb.P}/api-keys/${narrow.id}/revoke`, { key: sb.key }))
      expect(revoked.id).toBe(narrow.id)
      expect(revoked.status).toBe("revoked")
      expect(revoked.revoked_at).not.toBeNull()
      expect(Object.keys(revoked).filter((k) => /secret|hash/i.test(k))).toEqual([])
      expectError(yield* request("GET", `${sb.P}/users`, { key: narrow.secret }), 401, "authentication_error", "key_revoked")
      expectError(yield* request("GET", `${sb.P}/users`, { key: leaseSecret }), 401, "authentication_error", "key_revoked")

      const again = expectSingle(yield* request("POST", `${sb.P}/api-keys/${narrow.id}/revoke`, { key: sb.key }))
      expect(again.status).toBe("revoked")
      expect(again.revoked_at).toBe(revoked.revoked_at)
      const reread = expectSingle(yield* request("GET", `${sb.P}/api-keys/${narrow.id}`, { key: sb.key }))
      expect(reread).toMatchObject({ status: "revoked", revoked_at: revoked.revoked_at })

      // The management ceiling: the first key holds scopes this key lacks.
      expectError(
        yield* request("POST", `${sb.P}/api-keys/${first.id}/revoke`, { key: sb.key }),
        403,
        "permission_error"
      )
      expectSingle(yield* request("GET", sb.P, { key: first.secret }))

      // Another tenant's key is 404.
      const other = yield* provisionSandbox(MGMT, "Other")
      expectError(yield* request("GET", `${other.P}/api-keys/${narrow.id}`, { key: other.key }), 404, "not_found")
      expectError(
        yield* request("POST", `${other.P}/api-keys/${sb.keyId}/revoke`, { key: other.key }),
        404,
        "not_found"
      )
      expectSingle(yield* request("GET", sb.P, { key: sb.key }))
    }).pipe(Effect.provide(makeTestApp())))
})

describe("path identifiers (D2)", () => {
  it.live("1..128 characters: 128 is a valid id that is not found, 129 is 400", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(MGMT)
      const id128 = "user_" + "a".repeat(123)
      const id129 = "user_" + "a".repeat(124)
      expect(id128).toHaveLength(128)
      expect(id129).toHaveLength(129)

      const found = yield* request("GET", `${sb.P}/users/${id128}`, { key: sb.key })
      expectError(found, 404, "not_found", "resource_missing")
      const tooLong = yield* request("GET", `${sb.P}/users/${id129}`, { key: sb.key })
      expectError(tooLong, 400, "invalid_request")

      const patch128 = yield* request("PATCH", `${sb.P}/users/${id128}`, { key: sb.key, body: { display_name: "X" } })
      expectError(patch128, 404, "not_found", "resource_missing")
      const patch129 = yield* request("PATCH", `${sb.P}/users/${id129}`, { key: sb.key, body: { display_name: "X" } })
      expectError(patch129, 400, "invalid_request")

      const key128 = "key_" + "b".repeat(124)
      expectError(yield* request("GET", `${sb.P}/api-keys/${key128}`, { key: sb.key }), 404, "not_found", "resource_missing")
      expectError(yield* request("GET", `${sb.P}/api-keys/${key128}b`, { key: sb.key }), 400, "invalid_request")

      const tenant129 = "t".repeat(129)
      expectError(yield* request("GET", `/v1/tenants/${tenant129}`, { key: sb.key }), 400, "invalid_request")
      const tenant128 = "t".repeat(128)
      expectError(yield* request("GET", `/v1/tenants/${tenant128}`, { key: sb.key }), 404, "not_found", "resource_missing")
    }).pipe(Effect.provide(makeTestApp())))
})
