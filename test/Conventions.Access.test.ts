/**
 * Who may do what (contract 5, contract 4 rule 5, D1): the scopes of operator-made keys and of the
 * first key, revocation of a key and its descendants on the very next request, the management
 * ceiling, and the operator plane's separation from /v1.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { QUICKSTART_SCOPES } from "../src/Kernel/Scopes.js"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp, OPERATOR_TOKEN } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { sandboxWithManager } from "./support/Sandboxes.js"

layer(makeTestApp(), { excludeTestServices: true })("scopes (contract 5, D1)", (it) => {
  it.effect("a key made with scopes [users:read] lists users but cannot create one", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const made = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, {
        name: "reader",
        scopes: ["users:read"]
      })
      expect(made.status, made.text).toBe(201)
      expect(made.body.scopes).toEqual(["users:read"])
      expect(made.body.kind).toBe("console")
      const reader: string = made.body.secret
      expectList(yield* request("GET", `${sb.P}/users`, { key: reader }))
      const create = yield* request("POST", `${sb.P}/users`, { key: reader, body: { external_id: "r", display_name: "R" } })
      expectErrorCode(create, 403, "missing_scope")
      expectErrorCode(yield* request("GET", `/v1/tenants/${sb.tenantId}`, { key: reader }), 403, "missing_scope")
      expectErrorCode(yield* request("GET", `${sb.P}/api-keys`, { key: reader }), 403, "missing_scope")
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).body.items).toEqual([])
    }))

  it.effect("the first key has exactly the quickstart scopes", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const made = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "first" })
      expect(made.status, made.text).toBe(201)
      expect([...made.body.scopes].sort()).toEqual([...QUICKSTART_SCOPES].sort())
      expect(made.body.kind).toBe("quickstart")
      expect(made.body.secret).toMatch(/^sk_test_/)
      const shown = yield* request("GET", `${sb.P}/api-keys/${made.body.id}`, { key: sb.manager })
      expectSingle(shown)
      expect([...shown.body.data.scopes].sort()).toEqual([...QUICKSTART_SCOPES].sort())
      expect("secret" in shown.body.data).toBe(false)
      // The harness's first key is the same kind of key.
      const first = yield* request("GET", `${sb.P}/api-keys/${sb.keyId}`, { key: sb.manager })
      expect([...first.body.data.scopes].sort()).toEqual([...QUICKSTART_SCOPES].sort())
      // and it can do what those scopes say, and no more.
      expectList(yield* request("GET", "/v1/tenants", { key: made.body.secret }))
      expectSingle(yield* request("GET", sb.P, { key: made.body.secret }))
      expectErrorCode(yield* request("DELETE", sb.P, { key: made.body.secret }), 403, "missing_scope")
    }))

  it.effect("operator key creation naming an unknown scope is 400 and creates nothing", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const before = (yield* request("GET", `${sb.P}/api-keys`, { key: sb.manager })).body.items.length
      for (const scopes of [["users:read", "users:admin"], ["nope"], ["USERS:READ"], []]) {
        const res = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "bad", scopes })
        expectErrorCode(res, 400)
        expect(res.body.error.param, JSON.stringify(scopes)).toBe("scopes")
      }
      const after = (yield* request("GET", `${sb.P}/api-keys`, { key: sb.manager })).body.items.length
      expect(after).toBe(before)
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("revocation (contract 4 rule 5, 5.7)", (it) => {
  it.effect("a revoked key and its descendants are refused on the very next request", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* provisionSandbox()
      const m = yield* createKey(sb.tenantId, ["keys:read", "keys:revoke", "users:read"], "manager")
      const k = yield* createKey(sb.tenantId, ["keys:read", "users:read"], "target")

      // A descendant lease of K, written as the lease machinery would.
      const childSecret = KeySecrets.generate("sandbox")
      const childId = `key_child${Date.now()}`
      yield* sql`
        INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, parent_key_id, created_at)
        VALUES (${childId}, ${sb.tenantId}, 'sandbox', 'lease', 'derived', ${KeySecrets.prefixOf(childSecret)},
                ${KeySecrets.hash(childSecret)}, ${["users:read"]}::text[], ${k.id}, now())`
      const grandSecret = KeySecrets.generate("sandbox")
      const grandId = `key_grand${Date.now()}`
      yield* sql`
        INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, parent_key_id, created_at)
        VALUES (${grandId}, ${sb.tenantId}, 'sandbox', 'lease', 'derived', ${KeySecrets.prefixOf(grandSecret)},
                ${KeySecrets.hash(grandSecret)}, ${["users:read"]}::text[], ${childId}, now())`

      // Before: all work.
      expectList(yield* request("GET", `${sb.P}/api-keys`, { key: k.secret }))
      expectList(yield* request("GET", `${sb.P}/users`, { key: childSecret }))
      expectList(yield* request("GET", `${sb.P}/users`, { key: grandSecret }))
      const child = yield* request("GET", `${sb.P}/api-keys/${childId}`, { key: m.secret })
      expect(child.body.data.parent_key_id).toBe(k.id)
      expect(child.body.data.status).toBe("active")

      const revoked = yield* request("POST", `${sb.P}/api-keys/${k.id}/revoke`, { key: m.secret })
      expectSingle(revoked)
      expect(revoked.body.data.id).toBe(k.id)
      expect(revoked.body.data.status).toBe("revoked")
      expect(revoked.body.data.revoked_at).toBeTypeOf("string")

      // The very next request of K, and of its descendants, is refused.
      expectErrorCode(yield* request("GET", `${sb.P}/api-keys`, { key: k.secret }), 401, "key_revoked")
      expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: childSecret }), 401, "key_revoked")
      expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: grandSecret }), 401, "key_revoked")
      expectErrorCode(yield* request("POST", `${sb.P}/api-keys/${m.id}/revoke`, { key: k.secret }), 401, "key_revoked")
      for (const id of [childId, grandId]) {
        const shown = yield* request("GET", `${sb.P}/api-keys/${id}`, { key: m.secret })
        expect(shown.body.data.status).toBe("revoked")
      }
      // The manager and the unrelated first key still work.
      expectList(yield* request("GET", `${sb.P}/api-keys`, { key: m.secret }))
      expectList(yield* request("GET", "/v1/tenants", { key: sb.key }))
    }))

  it.effect("revoking a key with scopes outside the caller's is 403 outside_management_ceiling", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const m = yield* createKey(sb.tenantId, ["keys:read", "keys:revoke"], "manager")
      const wider = yield* createKey(sb.tenantId, ["keys:read", "keys:revoke", "users:read"], "wider")
      for (const target of [sb.keyId, wider.id]) {
        expectErrorCode(yield* request("POST", `${sb.P}/api-keys/${target}/revoke`, { key: m.secret }), 403, "outside_management_ceiling")
        const shown = yield* request("GET", `${sb.P}/api-keys/${target}`, { key: m.secret })
        expect(shown.body.data.status).toBe("active")
      }
      expectList(yield* request("GET", "/v1/tenants", { key: sb.key }))
      expectList(yield* request("GET", `${sb.P}/users`, { key: wider.secret }))
      // A missing key is 404, not 403.
      expectErrorCode(yield* request("POST", `${sb.P}/api-keys/key_doesnotexist/revoke`, { key: m.secret }), 404, "resource_missing")
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("the operator plane is separate (D1)", (it) => {
  it.effect("/operator/v1 rejects no token, a wrong token and a service key with the 401 envelope", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const body = { organization_name: "Intruder", contact_email: "x@y.co" }
      const keyPath = `/operator/v1/tenants/${sb.tenantId}/environments/sandbox/api-keys`
      for (const key of [undefined, "wrong", `${OPERATOR_TOKEN}x`, OPERATOR_TOKEN.slice(0, -1), sb.key, sb.manager]) {
        expectErrorCode(yield* request("POST", "/operator/v1/pilot-applications", { key, body }), 401)
        expectErrorCode(yield* request("POST", keyPath, { key, body: { name: "sneaky" } }), 401)
        expectErrorCode(yield* request("GET", "/operator/v1/pilot-applications/pilot_x", { key }), 401)
      }
      // No key was made by those attempts.
      const keys = yield* request("GET", `${sb.P}/api-keys`, { key: sb.manager })
      expect(keys.body.items.map((k: any) => k.id).sort()).toEqual([sb.keyId, sb.managerId].sort())
      // The right token works.
      const ok = yield* operator("POST", "/pilot-applications", body)
      expect(ok.status).toBe(201)
      expect(ok.body.status).toBe("submitted")
    }))

  it.effect("the operator token is not accepted on /v1", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (
        const [method, path] of [
          ["GET", "/v1/tenants"],
          ["GET", `/v1/tenants/${sb.tenantId}`],
          ["GET", `${sb.P}/api-keys`],
          ["POST", `${sb.P}/users`]
        ] as const
      ) {
        const res = yield* request(method, path, {
          key: OPERATOR_TOKEN,
          ...(method === "POST" ? { body: { external_id: "op", display_name: "Op" } } : {})
        })
        expectErrorCode(res, 401, "invalid_api_key")
      }
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).body.items).toEqual([])
    }))
})
