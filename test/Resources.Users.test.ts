/**
 * Users end to end over HTTP (contract parts 2, 4, 8; D3, D6): create, duplicate, get, update;
 * paging newest first with cursors bound to list and cell; deletion denying access at once,
 * revoking bound keys and tombstoning the external_id; the purge after 24 h and the tombstone's
 * 90 days on TestClock, for a user and for a whole tenant.
 * (A little over 400 lines: it is the one `users` describe block.)
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, TestClock } from "effect"
import { randomBytes } from "node:crypto"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { ALL_MANAGEMENT_SCOPES, postUser } from "./support/Sandboxes.js"
import { eventually, settle } from "./support/Waiting.js"

/**
 * For suites that move TestClock by months: TestClock wakes every periodic sweep in turn, and each
 * wake does real database IO, so 90 days of the default 60 s sweeps (and 150 s cell sweeps) would
 * take far longer than a test may. Wider intervals keep the purge within its 24 h bound
 * (PURGE_DELAY_SECONDS 1 h + one 6 h sweep) and the same code paths.
 */
const LONG_WINDOWS = { sweepIntervalSeconds: 6 * 3600, cellIdleTimeoutSeconds: 24 * 3600 }

/** Creates users one by one (sequential requests: each id is newer than the one before). */
const createUsers = (P: string, key: string, prefix: string, n: number) =>
  Effect.gen(function*() {
    const ids: Array<string> = []
    for (let i = 0; i < n; i++) {
      const res = yield* postUser(P, key, { external_id: `${prefix}-${i}`, display_name: `User ${prefix} ${i}` })
      ids.push(expectSingle(res, 201).id)
    }
    return ids
  })

describe("users", () => {
  it.live("create, duplicate, get, update", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
      const created = yield* postUser(sb.P, sb.key, { external_id: "cust-1", display_name: "Ada" })
      const user = expectSingle(created, 201)
      expect(user.id).toMatch(/^user_/)
      expect(user).toMatchObject({ object: "user", external_id: "cust-1", display_name: "Ada", email: null })

      expectError(
        yield* postUser(sb.P, sb.key, { external_id: "cust-1", display_name: "Other Ada" }),
        409,
        "conflict",
        "already_exists"
      )
      // Concurrent creates of one external_id: exactly one 201, the rest 409 already_exists.
      const racing = yield* Effect.all(
        Array.from({ length: 6 }, () => postUser(sb.P, sb.key, { external_id: "race", display_name: "Race" })),
        { concurrency: "unbounded" }
      )
      expect(racing.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409])
      for (const r of racing.filter((r) => r.status === 409)) expectError(r, 409, "conflict", "already_exists")
      expectError(yield* postUser(sb.P, sb.key, { external_id: "cust-2" }), 400, "invalid_request")
      expectError(
        yield* postUser(sb.P, sb.key, { external_id: "cust-2", display_name: "B", email: "not-an-email" }),
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
      const other = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Other")
      expectError(yield* request("GET", `${other.P}/users/${user.id}`, { key: other.key }), 404, "not_found")
      // users:write is needed to create.
      const reader = yield* createKey(sb.tenantId, ["users:read"])
      expectError(
        yield* postUser(sb.P, reader.secret, { external_id: "cust-9", display_name: "R" }),
        403,
        "permission_error",
        "missing_scope"
      )
    }).pipe(Effect.provide(makeTestApp())))

  it.live("listUser pages newest first with stable cursors; cursors are bound to list and cell", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Alpha")
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
      const b = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Beta")
      yield* createUsers(b.P, b.key, "b", 2)
      expectError(
        yield* request("GET", `${b.P}/users?cursor=${encodeURIComponent(p1.next_cursor!)}`, { key: b.key }),
        400,
        "invalid_request",
        "invalid_cursor"
      )
      // Malformed cursors and limits.
      for (const bad of ["garbage", "eyJ4IjoxfQ"]) {
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
      const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
      const sql = yield* SqlClient.SqlClient
      const user = expectSingle(
        yield* postUser(sb.P, sb.key, { external_id: "gone-1", display_name: "Bye", email: "bye@example.test" }),
        201
      )
      const keep = expectSingle(yield* postUser(sb.P, sb.key, { external_id: "keep-1", display_name: "Stay" }), 201)

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
        yield* postUser(sb.P, sb.key, { external_id: "gone-1", display_name: "Again" }),
        410,
        "gone",
        "tombstoned"
      )
      // Concurrent deletes of one user: one 202 (one job), the rest 410.
      const twin = expectSingle(yield* postUser(sb.P, sb.key, { external_id: "twin", display_name: "Twin" }), 201)
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
        const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
        const createBody = { external_id: "purge-me", display_name: "Purge Me", email: "p@example.test" }
        const user = expectSingle(
          yield* request("POST", `${sb.P}/users`, { key: sb.key, body: createBody, idempotencyKey: "create-purge-me" }),
          201
        )
        expectSingle(
          yield* request("PATCH", `${sb.P}/users/${user.id}`, { key: sb.key, body: { display_name: "Purge Me Too" } })
        )
        const bystander = expectSingle(
          yield* postUser(sb.P, sb.key, { external_id: "stays", display_name: "Stays Here", email: "s@example.test" }),
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
          yield* postUser(sb.P, sb.key, { external_id: "purge-me", display_name: "Again" }),
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
          yield* postUser(sb.P, sb.key, { external_id: "purge-me", display_name: "Reborn" }),
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
        const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
        const other = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Bystander")
        const first = yield* createKey(sb.tenantId)
        const user = expectSingle(
          yield* postUser(sb.P, sb.key, { external_id: "t-user", display_name: "T User", email: "t@example.test" }),
          201
        )
        expectSingle(yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "bot" } }), 201)

        const deleted = yield* request("DELETE", `/v1/tenants/${sb.tenantId}`, { key: sb.key })
        const job = expectSingle(deleted, 202)
        // D19: its keys are refused from the 202 on
        expectError(yield* request("GET", deleted.headers.get("location")!, { key: sb.key }), 401, "authentication_error", "key_revoked")

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
        // (sweeps every hour: the purge is due after PURGE_DELAY_SECONDS, 1 h; at the default
        // minute, moving TestClock by 24 h ran 1,440 passes of each sweep, most of the test's time)
      }).pipe(Effect.provide(makeTestApp({ sweepIntervalSeconds: 3600 })))
    }), { timeout: 180_000 })
})
