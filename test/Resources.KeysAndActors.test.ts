/**
 * Service actors and API keys end to end over HTTP (contract parts 2, 4, 8; D2, D3, D6): create,
 * get and list service actors; keys never showing a secret or hash, paged, revoked at once with
 * their leases, the management ceiling; path identifiers of 1..128 characters.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { ALL_MANAGEMENT_SCOPES } from "./support/Sandboxes.js"

describe("service actors", () => {
  it.live("create, get, list; another tenant's service actor is 404", () =>
    Effect.gen(function*() {
      const a = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Alpha")
      const b = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Beta")
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
      const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
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
      const other = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Other")
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
      const sb = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES)
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
