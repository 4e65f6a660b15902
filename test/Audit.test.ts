/**
 * The audit log (D16) over real HTTP on a fresh database: one entry per mutation (with its
 * request_id; none for its replay), per rolled-back or refused mutation (with its status), per
 * failed authentication with a key of the environment, per operator action; a mutation and its
 * entry commit together or not at all; filters and D6 cursors; the database refuses UPDATE and
 * DELETE; the retention sweep and the purge on TestClock.
 */
import { randomUUID } from "node:crypto"

import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import { Audit } from "../src/Audit.js"
import { makeTestApp, OPERATOR_TOKEN } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { sandboxWithKey, TERMINAL } from "./support/Sandboxes.js"
import { toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { advanceUntil } from "./support/Waiting.js"

const AUDITOR = ["users:read", "users:write", "keys:read", "keys:revoke", "audit:read"]

interface Row {
  readonly id: string
  readonly tenant_id: string
  readonly environment: string
  readonly occurred_at: Date
  readonly actor_type: string
  readonly actor_id: string
  readonly key_id: string | null
  readonly action: string
  readonly resource_type: string
  readonly resource_id: string
  readonly request_id: string
  readonly status: number
  readonly ip: string | null
}

/** The raw audit rows (of a tenant, when given), oldest first. */
const auditRows = (tenantId?: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Row>`SELECT * FROM audit_entries
             WHERE ${tenantId ?? null}::text IS NULL OR tenant_id = ${tenantId ?? null} ORDER BY id`.pipe(Effect.orDie))

/** One page of `GET P/audit` with this query. */
const auditPage = (P: string, key: string, query = "") => Effect.map(request("GET", `${P}/audit${query}`, { key }), expectList)

/** Every entry `GET P/audit` lists with this query (following cursors). */
const allEntries = (P: string, key: string, query = "") =>
  Effect.gen(function*() {
    const items: Array<any> = []
    let cursor: string | null = null
    do {
      const sep: string = query === "" ? "?" : "&"
      const page: { items: Array<any>; next_cursor: string | null } = yield* auditPage(
        P,
        key,
        `${query}${cursor === null ? "" : `${sep}cursor=${encodeURIComponent(cursor)}`}`
      )
      items.push(...page.items)
      cursor = page.next_cursor
    } while (cursor !== null)
    return items
  })

describe("audit entries of mutations", () => {
  it.live("a mutation: exactly one entry with its request_id and status; its replay: none", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(AUDITOR)
      const created = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "ada", display_name: "Ada" },
        idempotencyKey: "k-ada",
        headers: { "x-request-id": "audit-create-ada" }
      })
      const user = expectSingle(created, 201)
      const mine = (yield* auditRows(sb.tenantId)).filter((r) => r.request_id === "audit-create-ada")
      expect(mine).toHaveLength(1)
      expect(mine[0]).toMatchObject({
        environment: "sandbox",
        actor_type: "api_key",
        actor_id: sb.managerId,
        key_id: sb.managerId,
        action: "createUser",
        resource_type: "user",
        resource_id: user.id,
        status: 201,
        ip: "127.0.0.1"
      })
      expect(mine[0]!.id).toMatch(/^aud_[0-9a-z]{26}$/)

      // the API shows it, exactly in the documented shape
      const [entry] = (yield* auditPage(sb.P, sb.manager, "?action=createUser")).items
      expect(entry).toEqual({
        id: mine[0]!.id,
        object: "audit_entry",
        occurred_at: mine[0]!.occurred_at.toISOString(),
        actor: { type: "api_key", id: sb.managerId },
        key_id: sb.managerId,
        action: "createUser",
        resource: { type: "user", id: user.id },
        request_id: "audit-create-ada",
        status: 201,
        ip: "127.0.0.1"
      })

      // the replay answers the same and writes nothing: the mutation happened once
      const before = (yield* auditRows()).length
      const again = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "ada", display_name: "Ada" },
        idempotencyKey: "k-ada"
      })
      expect(again.status).toBe(201)
      expect(again.headers.get("idempotent-replayed")).toBe("true")
      expect((yield* auditRows()).length).toBe(before)
      expect((yield* auditPage(sb.P, sb.manager, "?action=createUser")).items).toHaveLength(1)

      // a stored error (409 already_exists, kept for its key) is an entry of its transaction, once
      const dup = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "ada", display_name: "Twin" },
        idempotencyKey: "k-twin"
      })
      expectErrorCode(dup, 409, "already_exists")
      yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "ada", display_name: "Twin" },
        idempotencyKey: "k-twin"
      })
      const conflicts = (yield* auditRows(sb.tenantId)).filter((r) => r.action === "createUser" && r.status === 409)
      expect(conflicts.map((r) => r.request_id)).toEqual([dup.headers.get("x-request-id")])
      // a path resource when nothing was answered: the user of a DELETE, the environment of a refused create
      const deleted = yield* request("DELETE", `${sb.P}/users/${user.id}`, { key: sb.manager })
      expect(deleted.status).toBe(202)
      const deletion = (yield* auditRows(sb.tenantId)).find((r) => r.request_id === deleted.headers.get("x-request-id"))
      expect(deletion).toMatchObject({ action: "deleteUser", resource_type: "user", resource_id: user.id, status: 202 })
    }).pipe(Effect.provide(makeTestApp())))

  it.live("refused and rolled-back mutations: one entry each, with the status answered", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(AUDITOR)
      const entryOf = (r: { headers: Headers }) =>
        Effect.map(auditRows(sb.tenantId), (rows) => rows.filter((x) => x.request_id === r.headers.get("x-request-id")))

      // 400 by validation (after the gate's transaction is opened: rolled back)
      const invalid = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { display_name: "No id" } })
      expectErrorCode(invalid, 400, "parameter_missing")
      expect(yield* entryOf(invalid)).toMatchObject([{
        action: "createUser",
        status: 400,
        resource_type: "environment",
        resource_id: "sandbox",
        actor_id: sb.managerId
      }])
      // 400 before the transaction: no Idempotency-Key
      const keyless = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "x", display_name: "X" },
        idempotencyKey: false
      })
      expectErrorCode(keyless, 400, "idempotency_key_required")
      expect(yield* entryOf(keyless)).toMatchObject([{ action: "createUser", status: 400 }])
      // 403: a scope the key does not have (the first key has no users:write)
      const denied = yield* request("POST", `${sb.P}/users`, { key: sb.key, body: { external_id: "y", display_name: "Y" } })
      expectErrorCode(denied, 403, "missing_scope")
      expect(yield* entryOf(denied)).toMatchObject([{ action: "createUser", status: 403, actor_id: sb.keyId, key_id: sb.keyId }])
      // 409 of the gate: the same key with another payload (not stored)
      expectSingle(
        yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "z", display_name: "Z" }, idempotencyKey: "k-z" }),
        201
      )
      const reused = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "z2", display_name: "Z" },
        idempotencyKey: "k-z"
      })
      expectErrorCode(reused, 409, "idempotency_key_reused")
      expect(yield* entryOf(reused)).toMatchObject([{ action: "createUser", status: 409 }])
      // a 404 (stored for its key): the resource is the one its path names
      const missing = yield* request("POST", `${sb.P}/api-keys/key_missing/revoke`, { key: sb.manager })
      expectErrorCode(missing, 404, "resource_missing")
      expect(yield* entryOf(missing)).toMatchObject([{
        action: "revokeApiKey",
        status: 404,
        resource_type: "api_key",
        resource_id: "key_missing"
      }])
      // nothing was created by the refused ones
      const users = expectList(yield* request("GET", `${sb.P}/users`, { key: sb.manager }))
      expect(users.items.map((u: any) => u.external_id)).toEqual(["z"])
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a mutation and its entry commit together: an entry that cannot be written rolls the mutation back", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* sandboxWithKey(AUDITOR)
      yield* sql.unsafe(`
        CREATE FUNCTION refuse_audit() RETURNS trigger AS $$
        BEGIN RAISE EXCEPTION 'audit refused for test'; END $$ LANGUAGE plpgsql`).pipe(Effect.orDie)
      yield* sql.unsafe(`
        CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_entries FOR EACH ROW
        WHEN (NEW.status < 300) EXECUTE FUNCTION refuse_audit()`).pipe(Effect.orDie)

      const failed = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "atomic", display_name: "A" },
        idempotencyKey: "k-atomic"
      })
      expect(failed.status).toBe(500)
      expect(failed.body.error.code).toBe("internal_error")
      const users = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM users WHERE external_id = 'atomic'`.pipe(Effect.orDie)
      expect(users[0]!.n).toBe(0)
      const stored = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM idempotency_keys WHERE key = 'k-atomic'`.pipe(Effect.orDie)
      expect(stored[0]!.n).toBe(0)
      // its entry, on its own after the rollback, says what was answered
      expect((yield* auditRows(sb.tenantId)).filter((r) => r.request_id === failed.headers.get("x-request-id"))).toMatchObject([
        { action: "createUser", status: 500 }
      ])

      // the same holds for an operator action
      const key = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, {
        name: "atomic",
        scopes: ["users:read"]
      })
      expect(key.status).toBe(500)
      const keys = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM api_keys WHERE name = 'atomic'`.pipe(Effect.orDie)
      expect(keys[0]!.n).toBe(0)

      // once entries can be written, the retry executes once
      yield* sql.unsafe(`DROP TRIGGER refuse_audit ON audit_entries`).pipe(Effect.orDie)
      const retried = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "atomic", display_name: "A" },
        idempotencyKey: "k-atomic"
      })
      expectSingle(retried, 201)
      expect((yield* auditRows(sb.tenantId)).filter((r) => r.action === "createUser").map((r) => r.status)).toEqual([500, 201])
    }).pipe(Effect.provide(makeTestApp())))
})

describe("audit entries of failed authentications and operator actions", () => {
  it.live("a revoked key: one entry a minute; a known key prefix with a wrong secret, an unknown key: none", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(AUDITOR)
      const narrow = yield* createKey(sb.tenantId, ["users:read"], "narrow")
      expectList(yield* request("GET", `${sb.P}/users`, { key: narrow.secret }))
      expectSingle(yield* request("POST", `${sb.P}/api-keys/${narrow.id}/revoke`, { key: sb.manager }))

      const before = yield* auditRows()
      const refused = yield* request("GET", `${sb.P}/users`, { key: narrow.secret, headers: { "x-request-id": "revoked-try" } })
      expectError(refused, 401, "authentication_error", "key_revoked")
      const added = (yield* auditRows()).filter((r) => !before.some((b) => b.id === r.id))
      expect(added).toHaveLength(1)
      expect(added[0]).toMatchObject({
        tenant_id: sb.tenantId,
        environment: "sandbox",
        actor_type: "api_key",
        actor_id: narrow.id,
        key_id: narrow.id,
        action: "listUser",
        resource_type: "environment",
        resource_id: "sandbox",
        request_id: "revoked-try",
        status: 401,
        ip: "127.0.0.1"
      })

      // within the minute, the key's further failures are not audited again (D20)
      for (let i = 0; i < 5; i++) {
        expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: narrow.secret }), 401, "key_revoked")
      }
      // an unknown secret with a key's display prefix is no key's: never attributed to an environment (D20)
      const forged = `${narrow.secret.slice(0, 16)}${"A".repeat(narrow.secret.length - 16)}`
      expect(forged).not.toBe(narrow.secret)
      const unattributed = yield* createKey(sb.tenantId, ["users:read"], "never-refused")
      const forgedOther = `${unattributed.secret.slice(0, 16)}${"A".repeat(unattributed.secret.length - 16)}`
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { key: forged, body: {} }), 401, "invalid_api_key")
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { key: forgedOther, body: {} }), 401, "invalid_api_key")
      const count = (yield* auditRows()).length
      expect((yield* auditRows()).filter((r) => !before.some((b) => b.id === r.id) && r.status === 401)).toHaveLength(1)

      // no identifiable environment: nothing is written (only logged)
      expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: `sk_test_${"B".repeat(43)}` }), 401, "invalid_api_key")
      expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: "garbage" }), 401, "invalid_api_key")
      expectErrorCode(yield* request("GET", `${sb.P}/users`), 401, "missing_api_key")
      expect((yield* auditRows()).length).toBe(count)
      // the entry is listed to the environment's auditors
      const listed = yield* auditPage(sb.P, sb.manager, `?actor_id=${narrow.id}&action=listUser`)
      expect(listed.items.map((e: any) => [e.request_id, e.status])).toEqual([["revoked-try", 401]])
    }).pipe(Effect.provide(makeTestApp())))

  it.effect("a refused key's failures are audited at most once a minute (D20)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sb = yield* sandboxWithKey(AUDITOR)
        const narrow = yield* createKey(sb.tenantId, ["users:read"], "narrow")
        expectSingle(yield* request("POST", `${sb.P}/api-keys/${narrow.id}/revoke`, { key: sb.manager }))
        const refusals = Effect.map(auditRows(sb.tenantId), (rows) => rows.filter((r) => r.status === 401).length)
        const refuse = Effect.flatMap(
          request("GET", `${sb.P}/users`, { key: narrow.secret }),
          (r) => Effect.sync(() => expectErrorCode(r, 401, "key_revoked"))
        )
        yield* Effect.all([refuse, refuse, refuse], { concurrency: "unbounded" })
        expect(yield* refusals).toBe(1)
        yield* TestClock.adjust("59 seconds")
        yield* refuse
        expect(yield* refusals).toBe(1)
        yield* TestClock.adjust("2 seconds")
        yield* refuse
        yield* refuse
        expect(yield* refusals).toBe(2)
      }).pipe(Effect.provide(makeTestApp()))
    }), 60_000)

  it.live("operator actions: an entry of actor operator in the environment they are about", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(AUDITOR)
      const rows = yield* auditRows(sb.tenantId)
      // provisioning: the approval (in the sandbox it made) and the first key
      expect(rows.map((r) => [r.action, r.actor_type, r.actor_id, r.key_id, r.status])).toEqual([
        ["approvePilotApplication", "operator", "operator", null, 200],
        ["operatorCreateApiKey", "operator", "operator", null, 201]
      ])
      expect(rows[0]).toMatchObject({ resource_type: "pilot_application" })
      expect(rows[1]).toMatchObject({ resource_type: "api_key", resource_id: sb.keyId })

      // a refused action is an entry with its status (rolled back, written on its own)
      const refused = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "x", scopes: ["nope:read"] })
      expect(refused.status).toBe(400)
      // a read about the environment too
      expect((yield* operator("GET", `/tenants/${sb.tenantId}/environments/sandbox/quickstart`)).status).toBe(200)
      // and a signing key rotation, its resource the environment
      expect((yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/signing-keys/rotate`)).status).toBe(200)
      const later = (yield* auditRows(sb.tenantId)).slice(2)
      expect(later.map((r) => [r.action, r.status, r.actor_type, r.resource_type, r.resource_id])).toEqual([
        ["operatorCreateApiKey", 400, "operator", "environment", "sandbox"],
        ["getQuickstart", 200, "operator", "environment", "sandbox"],
        ["rotateSigningKey", 200, "operator", "environment", "sandbox"]
      ])
      // without an environment (an unknown tenant, a pilot application) or a valid operator token: nothing
      const count = (yield* auditRows()).length
      expect((yield* operator("GET", `/tenants/ten_missing/environments/sandbox/quickstart`)).status).toBe(404)
      expect((yield* operator("POST", "/pilot-applications", { organization_name: "B", contact_email: "b@b.test" })).status).toBe(201)
      const noToken = yield* request("POST", `/operator/v1/tenants/${sb.tenantId}/environments/sandbox/api-keys`, {
        key: "wrong",
        body: { name: "n" }
      })
      expect(noToken.status).toBe(401)
      expect((yield* auditRows()).length).toBe(count)
      // the auditor sees the operator's actions
      const listed = yield* allEntries(sb.P, sb.key, "?actor_id=operator")
      expect(listed.map((e: any) => e.action)).toEqual([
        "rotateSigningKey",
        "getQuickstart",
        "operatorCreateApiKey",
        "operatorCreateApiKey",
        "approvePilotApplication"
      ])
      expect(listed.every((e: any) => e.actor.type === "operator" && e.key_id === null)).toBe(true)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("listing the audit log", () => {
  it.live("newest first; filters; D6 cursors bound to their filters, stable under concurrent inserts; audit:read", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(AUDITOR)
      const users: Array<string> = []
      for (const name of ["u1", "u2", "u3", "u4", "u5"]) {
        users.push(
          expectSingle(yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: name, display_name: name } }), 201)
            .id
        )
      }
      expectSingle(yield* request("PATCH", `${sb.P}/users/${users[0]}`, { key: sb.manager, body: { display_name: "First" } }))

      const all = yield* allEntries(sb.P, sb.manager)
      expect(all.map((e) => e.id)).toEqual([...all.map((e) => e.id)].sort().reverse()) // newest first
      expect(all.map((e) => e.action).slice(0, 6)).toEqual(["updateUser", ...Array(5).fill("createUser")])
      expect(all.map((e) => e.action)).toContain("approvePilotApplication")

      // pages of 2, with entries added between pages: every entry of the first page's time once
      const seen: Array<string> = []
      let page = yield* auditPage(sb.P, sb.manager, "?action=createUser&limit=2")
      seen.push(...page.items.map((e: any) => e.id))
      while (page.next_cursor !== null) {
        expectSingle(
          yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: `n${seen.length}`, display_name: "N" } }),
          201
        )
        page = yield* auditPage(sb.P, sb.manager, `?action=createUser&limit=2&cursor=${encodeURIComponent(page.next_cursor)}`)
        seen.push(...page.items.map((e: any) => e.id))
      }
      expect(seen).toEqual(all.filter((e) => e.action === "createUser").map((e) => e.id))

      // filters: resource, actor, action, time
      const first = yield* allEntries(sb.P, sb.manager, `?resource_id=${users[0]}`)
      expect(first.map((e) => e.action)).toEqual(["updateUser", "createUser"])
      expect(yield* allEntries(sb.P, sb.manager, `?actor_id=${sb.keyId}`)).toEqual([])
      expect((yield* allEntries(sb.P, sb.manager, `?actor_id=${sb.managerId}&action=updateUser`)).map((e) => e.resource.id)).toEqual([
        users[0]
      ])
      const pivot = all[3].occurred_at as string
      const from = yield* allEntries(sb.P, sb.manager, `?from=${encodeURIComponent(pivot)}`)
      const to = yield* allEntries(sb.P, sb.manager, `?to=${encodeURIComponent(pivot)}`)
      const now = yield* allEntries(sb.P, sb.manager)
      expect(from.map((e) => e.id)).toEqual(now.filter((e) => e.occurred_at >= pivot).map((e) => e.id))
      expect(to.map((e) => e.id)).toEqual(now.filter((e) => e.occurred_at < pivot).map((e) => e.id))
      expect(from.length + to.length).toBe(now.length)
      expect(from.length).toBeGreaterThan(0)
      expect(to.length).toBeGreaterThan(0)
      expect(yield* allEntries(sb.P, sb.manager, "?from=2999-01-01T00:00:00Z")).toEqual([])
      expect((yield* allEntries(sb.P, sb.manager, "?from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z")).length).toBe(now.length)

      // refusals: from after to, a malformed time, a cursor of other filters, a limit out of range
      expectError(
        yield* request("GET", `${sb.P}/audit?from=2025-02-01T00:00:00Z&to=2025-01-01T00:00:00Z`, { key: sb.manager }),
        400,
        "invalid_request",
        "parameter_invalid",
        "from"
      )
      expectErrorCode(yield* request("GET", `${sb.P}/audit?from=yesterday`, { key: sb.manager }), 400, "parameter_invalid")
      const paged = yield* auditPage(sb.P, sb.manager, "?action=createUser&limit=1")
      expect(paged.next_cursor).not.toBeNull()
      expectError(
        yield* request("GET", `${sb.P}/audit?action=updateUser&cursor=${encodeURIComponent(paged.next_cursor!)}`, { key: sb.manager }),
        400,
        "invalid_request",
        "invalid_cursor",
        "cursor"
      )
      expectErrorCode(yield* request("GET", `${sb.P}/audit?limit=0`, { key: sb.manager }), 400, "parameter_invalid")
      // audit:read: the first key has it not; another tenant's log is 404
      expectError(yield* request("GET", `${sb.P}/audit`, { key: sb.key }), 403, "permission_error", "missing_scope")
      const other = yield* sandboxWithKey(AUDITOR, "manager", "Other")
      expectErrorCode(yield* request("GET", `${other.P}/audit`, { key: sb.manager }), 404, "resource_missing")
      expect((yield* allEntries(other.P, other.manager)).every((e) => !all.some((a) => a.id === e.id))).toBe(true)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("the audit log is append-only and kept for its retention", () => {
  it.live("the database refuses UPDATE, DELETE and TRUNCATE of entries, except the sweep's DELETE", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* provisionSandbox(AUDITOR)
      const [row] = yield* auditRows(sb.tenantId)
      expect(row).toBeDefined()
      const refused = (statement: string) =>
        Effect.map(
          Effect.either(sql.unsafe(statement)),
          (r) => (r._tag === "Left" ? String((r.left as any).cause?.message ?? r.left) : "done")
        )
      expect(yield* refused(`UPDATE audit_entries SET status = 200 WHERE id = '${row!.id}'`)).toMatch(/append-only \(UPDATE refused\)/)
      expect(yield* refused(`DELETE FROM audit_entries WHERE id = '${row!.id}'`)).toMatch(/append-only \(DELETE refused\)/)
      expect(yield* refused(`TRUNCATE audit_entries`)).toMatch(/append-only \(TRUNCATE refused\)/)
      // the flag holds for its own transaction only, and never allows an UPDATE
      const inSweep = (statement: string) =>
        Effect.either(
          sql.withTransaction(Effect.zipRight(sql`SELECT set_config('agent_platform.audit_sweep', 'on', true)`, sql.unsafe(statement)))
        )
      expect((yield* inSweep(`UPDATE audit_entries SET status = 200 WHERE id = '${row!.id}'`))._tag).toBe("Left")
      expect((yield* auditRows(sb.tenantId)).find((r) => r.id === row!.id)?.status).toBe(row!.status)
      expect((yield* inSweep(`DELETE FROM audit_entries WHERE id = '${row!.id}'`))._tag).toBe("Right")
      expect((yield* auditRows(sb.tenantId)).some((r) => r.id === row!.id)).toBe(false)
      expect(yield* refused(`DELETE FROM audit_entries`)).toMatch(/append-only \(DELETE refused\)/)
    }).pipe(Effect.provide(makeTestApp())))

  it.effect(
    "entries older than the environment's audit_retention_days are swept (TestClock); others keep 90 days",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const short = yield* sandboxWithKey(AUDITOR)
          const long = yield* sandboxWithKey(AUDITOR, "manager", "Long")
          const early = expectSingle(
            yield* request("POST", `${short.P}/users`, { key: short.manager, body: { external_id: "e", display_name: "E" } }),
            201
          )
          yield* TestClock.adjust("12 hours")
          // the shortest retention (D20: the operator's 7 days; a key may only raise it)
          const setting = yield* operator("PATCH", `/tenants/${short.tenantId}/environments/sandbox/settings`, {
            audit_retention_days: 7
          })
          expect(setting.body.audit_retention_days, setting.text).toBe(7)
          const kept = (yield* auditRows(short.tenantId)).filter((r) => r.request_id === setting.headers.get("x-request-id"))
          expect(kept).toHaveLength(1)

          // 7 days after the first entries they are swept by the loop (every 6 h here); the later one stays
          yield* TestClock.adjust("156 hours")
          const swept = yield* advanceUntil(
            "6 hours",
            auditRows(short.tenantId),
            (rows) => !rows.some((r) => r.resource_id === early.id),
            3
          )
          expect(swept.map((r) => r.id)).toEqual([kept[0]!.id])
          expect(yield* advanceUntil("6 hours", auditRows(short.tenantId), (rows) => rows.length === 0, 4)).toEqual([])

          // the other environment keeps its entries 90 days (the default): two written 89 and 91 days ago
          const longRows = yield* auditRows(long.tenantId)
          expect(longRows.length).toBeGreaterThanOrEqual(2)
          const sql = yield* SqlClient.SqlClient
          const now = yield* Clock.currentTimeMillis
          for (const days of [89, 91]) {
            yield* sql`INSERT INTO audit_entries (tenant_id, environment, id, occurred_at, actor_type, actor_id, action,
                                                resource_type, resource_id, request_id, status)
                     VALUES (${long.tenantId}, 'sandbox', ${`aud_old${days}`}, ${new Date(now - days * 86_400_000)}, 'operator',
                             'operator', 'test', 'environment', 'sandbox', ${`req_${days}`}, 200)`.pipe(Effect.orDie)
          }
          yield* (yield* Audit).sweep
          const left = yield* auditRows(long.tenantId)
          expect(left.map((r) => r.request_id).sort()).toEqual([...longRows.map((r) => r.request_id), "req_89"].sort())
        }).pipe(Effect.provide(makeTestApp({ sweepIntervalSeconds: 6 * 3600, cellIdleTimeoutSeconds: 24 * 3600 })))
      }),
    120_000
  )

  it.effect("a purged environment's entries go with it, and nothing is written to it afterwards", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const sb = yield* sandboxWithKey([...AUDITOR, "environments:write"])
        expectSingle(yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "p", display_name: "P" } }), 201)
        expect((yield* request("DELETE", sb.P, { key: sb.manager })).status).toBe(202)
        // until the purge, a deleted environment's key is refused and audited there
        expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: sb.manager }), 401, "key_revoked")
        expect((yield* auditRows(sb.tenantId)).map((r) => r.action).slice(-2)).toEqual(["deleteEnvironment", "listUser"])
        const jobState = Effect.map(
          sql<{ state: string }>`SELECT state FROM deletion_jobs WHERE tenant_id = ${sb.tenantId} AND resource_type = 'environment'`.pipe(
            Effect.orDie
          ),
          (rows) => rows[0]?.state
        )
        expect(yield* advanceUntil("10 minutes", jobState, (s) => s === "succeeded", 20)).toBe("succeeded")
        expect(yield* auditRows(sb.tenantId)).toEqual([])
        expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: sb.manager }), 401, "key_revoked")
        expect(yield* auditRows(sb.tenantId)).toEqual([])
      }).pipe(Effect.provide(makeTestApp({ sweepIntervalSeconds: 60 })))
    }), 120_000)
})

describe("no secrets in the audit log", () => {
  it.live(
    "keys, credentials, assertions and actor tokens a test creates are in no audit row and no answer of the log",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const s = yield* toolHostSandbox([{ type: "text", text: "ok" }])
        const tenantId = s.sb.tenantId
        const auditor = yield* createKey(tenantId, ["audit:read", "keys:read", "keys:revoke", "users:read"], "auditor")
        const secrets: Array<string> = [OPERATOR_TOKEN, s.sb.key, s.key, auditor.secret]

        // a model profile's credential, accepted, and one refused with its request
        const credential = `sk-proj-credential-${randomUUID()}`
        expectSingle(yield* s.call("POST", "/model-profiles", { name: "gpt", provider: "openai", model: "gpt-4.1", credential }), 201)
        const refusedCredential = `sk-proj-refused-${randomUUID()}`
        const refused = yield* s.call("POST", "/model-profiles", {
          name: "bad",
          provider: "scripted",
          model: "scripted-1",
          settings: { steps: [] },
          credential: refusedCredential
        })
        expect(refused.status).toBe(400)
        secrets.push(credential, refusedCredential)

        // an identity-provider assertion, the actor token it made, a run acting with it
        const assertion = yield* s.assertion()
        const session = expectSingle(yield* s.postSession(assertion), 201) as { token: string }
        secrets.push(assertion, session.token)
        const run = yield* s.startRunWith({ "x-actor-token": session.token })
        expect((yield* s.waitFor(run.id, TERMINAL)).status).toBe("succeeded")

        // a key created, revoked and used; an unknown secret with its prefix
        const revoked = yield* createKey(tenantId, ["users:read"], "to-revoke")
        expectSingle(yield* request("POST", `${s.sb.P}/api-keys/${revoked.id}/revoke`, { key: auditor.secret }))
        expectErrorCode(yield* request("GET", `${s.sb.P}/users`, { key: revoked.secret }), 401, "key_revoked")
        const forged = `${revoked.secret.slice(0, 16)}${"Q".repeat(revoked.secret.length - 16)}`
        expectErrorCode(yield* request("GET", `${s.sb.P}/users`, { key: forged }), 401, "invalid_api_key")
        secrets.push(revoked.secret, forged)
        // and the operator's own actions about the environment
        expect((yield* operator("POST", `/tenants/${tenantId}/environments/sandbox/signing-keys/rotate`)).status).toBe(200)

        const rows = yield* sql<{ j: string }>`SELECT row_to_json(a)::text AS j FROM audit_entries a WHERE tenant_id = ${tenantId}`.pipe(
          Effect.orDie
        )
        const raw = rows.map((r) => r.j).join("\n")
        const answers: Array<string> = []
        let cursor: string | null = null
        do {
          const page: Reply = yield* request(
            "GET",
            `${s.sb.P}/audit?limit=100${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
            {
              key: auditor.secret
            }
          )
          expect(page.status).toBe(200)
          answers.push(page.text)
          cursor = page.body.next_cursor
        } while (cursor !== null)
        const listed = answers.join("\n")

        // the log holds what happened...
        const actions = new Set(rows.map((r) => JSON.parse(r.j).action))
        for (
          const action of [
            "createModelProfile",
            "createActorSession",
            "createRun",
            "updateSettings",
            "revokeApiKey",
            "reviewConnection",
            "operatorCreateApiKey",
            "rotateSigningKey",
            "listUser"
          ]
        ) expect(actions, action).toContain(action)
        expect(rows.length).toBeGreaterThan(15)
        expect(listed.split("\"object\":\"audit_entry\"").length - 1).toBe(rows.length)
        // ...and no secret, whole or its random part
        for (const secret of secrets) {
          for (const text of [raw, listed]) {
            expect(text).not.toContain(secret)
            expect(text).not.toContain(secret.slice(-24))
          }
        }
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    60_000
  )
})
