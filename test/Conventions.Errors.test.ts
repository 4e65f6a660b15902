/**
 * Errors over the public API by the D3 status and type mapping (400 for limits, cursors,
 * environment names, path identifiers, bodies and Idempotency-Key; 401; 403; 404), and tenant
 * isolation (D3): another tenant's resources are a 404 of the same shape as a missing id.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp, OPERATOR_TOKEN } from "./support/App.js"
import { type Reply, request } from "./support/Client.js"
import { expectErrorCode, expectList, expectSingle, keysOf } from "./support/Envelopes.js"
import { createUser, sandboxWithManager } from "./support/Sandboxes.js"

/** The "shape" D3 compares across 404s: status, type, code, keys of the body and of the error. */
const shapeOf = (res: Reply) => ({
  status: res.status,
  keys: keysOf(res.body),
  errorKeys: keysOf(res.body.error),
  type: res.body.error.type,
  code: res.body.error.code
})

layer(makeTestApp(), { excludeTestServices: true })("D3 status and type mapping", (it) => {
  it.effect("400 invalid_request: limit outside 1..100 or not an integer", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const limit of ["0", "101", "abc", "1.5", "-1", ""]) {
        for (const list of [`${sb.P}/users`, `${sb.P}/api-keys`, `${sb.P}/service-actors`, "/v1/tenants"]) {
          const key = list === "/v1/tenants" ? sb.key : sb.manager
          const res = yield* request("GET", `${list}?limit=${limit}`, { key })
          expectErrorCode(res, 400)
          expect(res.body.error.param, `${list}?limit=${limit}`).toBe("limit")
        }
      }
      for (const limit of ["1", "100"]) expectList(yield* request("GET", `${sb.P}/users?limit=${limit}`, { key: sb.manager }))
    }))

  it.effect("400 invalid_cursor: malformed, or from another list or another tenant", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager("A")
      const other = yield* sandboxWithManager("B")
      for (const id of ["u1", "u2"]) {
        yield* createUser(sb.P, sb.manager, id)
        yield* createUser(other.P, other.manager, id)
      }
      const page = yield* request("GET", `${sb.P}/users?limit=1`, { key: sb.manager })
      const cursor: string = page.body.next_cursor
      expect(cursor).toBeTypeOf("string")
      const foreign = (yield* request("GET", `${other.P}/users?limit=1`, { key: other.manager })).body.next_cursor as string

      for (
        const [path, key] of [
          [`${sb.P}/users?cursor=garbage`, sb.manager],
          [`${sb.P}/users?cursor=${encodeURIComponent(Buffer.from("{\"l\":\"users\"}").toString("base64url"))}`, sb.manager],
          [`${sb.P}/api-keys?cursor=${encodeURIComponent(cursor)}`, sb.manager],
          [`${sb.P}/service-actors?cursor=${encodeURIComponent(cursor)}`, sb.manager],
          [`${sb.P}/users?cursor=${encodeURIComponent(foreign)}`, sb.manager]
        ] as const
      ) {
        const res = yield* request("GET", path, { key })
        expectErrorCode(res, 400, "invalid_cursor")
        expect(res.body.error.param).toBe("cursor")
      }
      // The cursor itself is fine where it belongs.
      expectList(yield* request("GET", `${sb.P}/users?limit=1&cursor=${encodeURIComponent(cursor)}`, { key: sb.manager }))
    }))

  it.effect("400 for an unknown environment name in the path", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const base = `/v1/tenants/${sb.tenantId}/environments/staging`
      for (const path of [base, `${base}/users`, `${base}/api-keys`, `${base}/users/user_x`, `${base}/service-actors`]) {
        const res = yield* request("GET", path, { key: sb.manager })
        expectErrorCode(res, 400)
        expect(res.body.error.param).toBe("environment")
      }
      expectErrorCode(yield* request("POST", `${base}/users`, { key: sb.manager, body: { external_id: "x", display_name: "X" } }), 400)
    }))

  it.effect("path identifiers: 1..128 chars are looked up, 129 chars are 400", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const length of [101, 128]) {
        const id = "x".repeat(length)
        expectErrorCode(yield* request("GET", `/v1/tenants/${id}`, { key: sb.key }), 404, "resource_missing")
        expectErrorCode(yield* request("GET", `${sb.P}/users/${id}`, { key: sb.manager }), 404, "resource_missing")
        expectErrorCode(yield* request("GET", `${sb.P}/api-keys/${id}`, { key: sb.manager }), 404, "resource_missing")
      }
      const long = "x".repeat(129)
      for (
        const [path, param] of [
          [`/v1/tenants/${long}`, "tenant_id"],
          [`/v1/tenants/${long}/environments`, "tenant_id"],
          [`${sb.P}/users/${long}`, "user_id"],
          [`${sb.P}/api-keys/${long}`, "key_id"],
          [`${sb.P}/service-actors/${long}`, "service_actor_id"]
        ] as const
      ) {
        const res = yield* request("GET", path, { key: sb.manager })
        expectErrorCode(res, 400)
        expect(res.body.error.param, path).toBe(param)
      }
      expectErrorCode(yield* request("POST", `${sb.P}/api-keys/${long}/revoke`, { key: sb.manager }), 400)
      expectErrorCode(yield* request("GET", `/v1/tenants/${"y".repeat(2000)}`, { key: sb.key }), 400)
    }))

  it.effect("400 for a body that is not JSON or fails validation", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { key: sb.manager, rawBody: "{not json" }), 400)
      expectErrorCode(yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, rawBody: "[1," }), 400)
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { key: sb.manager, rawBody: "" }), 400)
      // The operator plane too.
      const op = yield* request("POST", "/operator/v1/pilot-applications", { key: OPERATOR_TOKEN, rawBody: "{\"organization_name\":" })
      expectErrorCode(op, 400)
      const missing = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "x" } })
      expectErrorCode(missing, 400)
      expect(missing.body.error.param).toBe("display_name")
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: 7, display_name: "X" } }), 400)
      // Nothing was created.
      const users = yield* request("GET", `${sb.P}/users`, { key: sb.manager })
      expect(users.body.items).toEqual([])
    }))

  it.effect("400 idempotency_key_required / bad Idempotency-Key on mutations", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const body = { external_id: "idem", display_name: "Idem" }
      const missing = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body, idempotencyKey: false })
      expectErrorCode(missing, 400, "idempotency_key_required")
      expect(missing.body.error.param).toBe("Idempotency-Key")
      expectErrorCode(
        yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, body: { name: "N" }, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )
      expectErrorCode(
        yield* request("DELETE", `${sb.P}/users/user_x`, { key: sb.manager, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )
      expectErrorCode(
        yield* request("POST", `${sb.P}/api-keys/${sb.keyId}/revoke`, { key: sb.manager, idempotencyKey: false }),
        400,
        "idempotency_key_required"
      )
      for (const bad of ["has space", "a".repeat(256), "tab\tin"]) {
        const res = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body, idempotencyKey: bad })
        expectErrorCode(res, 400)
        expect(res.body.error.code).not.toBe("idempotency_key_required")
        expect(res.body.error.param).toBe("Idempotency-Key")
      }
      // None of those created the user or revoked the key; a good key (255 chars of 0x21..0x7E) works.
      const good = "!~" + "k".repeat(253)
      expectSingle(yield* request("POST", `${sb.P}/users`, { key: sb.manager, body, idempotencyKey: good }), 201)
      expectList(yield* request("GET", "/v1/tenants", { key: sb.key }))
    }))

  it.effect("401 authentication_error: missing, garbage and unknown keys", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const path of ["/v1/tenants", `/v1/tenants/${sb.tenantId}`, `${sb.P}/users`]) {
        expectErrorCode(yield* request("GET", path), 401, "missing_api_key")
        expectErrorCode(yield* request("GET", path, { key: "garbage" }), 401, "invalid_api_key")
        expectErrorCode(yield* request("GET", path, { key: KeySecrets.generate("sandbox") }), 401, "invalid_api_key")
        expectErrorCode(yield* request("GET", path, { key: KeySecrets.generate("production") }), 401, "invalid_api_key")
        // A known key with one character changed is unknown.
        const flipped = sb.key.slice(0, -1) + (sb.key.endsWith("A") ? "B" : "A")
        expectErrorCode(yield* request("GET", path, { key: flipped }), 401, "invalid_api_key")
      }
      // Mutations are refused before anything else.
      expectErrorCode(yield* request("POST", `${sb.P}/users`, { body: { external_id: "x", display_name: "X" } }), 401, "missing_api_key")
    }))

  it.effect("403 permission_error missing_scope for the first key outside its abilities", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const list = yield* request("GET", `${sb.P}/users`, { key: sb.key })
      expectErrorCode(list, 403, "missing_scope")
      expect(list.body.error.message).toContain("users:read")
      const create = yield* request("POST", `${sb.P}/users`, { key: sb.key, body: { external_id: "q", display_name: "Q" } })
      expectErrorCode(create, 403, "missing_scope")
      expect(create.body.error.message).toContain("users:write")
      const revoke = yield* request("POST", `${sb.P}/api-keys/${sb.managerId}/revoke`, { key: sb.key })
      expectErrorCode(revoke, 403, "missing_scope")
      expect(revoke.body.error.message).toContain("keys:revoke")
      expectErrorCode(yield* request("GET", `${sb.P}/api-keys`, { key: sb.key }), 403, "missing_scope")
      expectErrorCode(yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.key, body: { name: "x" } }), 403, "missing_scope")
      // The refused calls changed nothing.
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).body.items).toEqual([])
      expectList(yield* request("GET", "/v1/tenants", { key: sb.manager }))
    }))

  it.effect("404 not_found: another tenant's id and the other environment look like a missing resource", () =>
    Effect.gen(function*() {
      const a = yield* sandboxWithManager("A")
      const b = yield* sandboxWithManager("B")
      const ownMissing = yield* request("GET", `${a.P}/users/user_doesnotexist`, { key: a.manager })
      expectErrorCode(ownMissing, 404, "resource_missing")
      const expected = shapeOf(ownMissing)
      for (
        const path of [
          `/v1/tenants/${b.tenantId}`,
          `/v1/tenants/${b.tenantId}/environments`,
          `/v1/tenants/ten_doesnotexist`,
          `/v1/tenants/${a.tenantId}/environments/production`,
          `/v1/tenants/${a.tenantId}/environments/production/users`,
          `/v1/tenants/${a.tenantId}/environments/production/api-keys`,
          `${a.P}/api-keys/key_doesnotexist`,
          `${a.P}/service-actors/sa_doesnotexist`
        ]
      ) {
        const res = yield* request("GET", path, { key: a.manager })
        expectErrorCode(res, 404)
        expect(shapeOf(res), path).toEqual(expected)
      }
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("tenant isolation (D3)", (it) => {
  it.effect("A's key sees B's tenant, users and keys as 404 of the same shape as its own missing ids", () =>
    Effect.gen(function*() {
      const a = yield* sandboxWithManager("A")
      const b = yield* sandboxWithManager("B")
      const userB = yield* createUser(b.P, b.manager, "b-user")
      const actorB = (yield* request("POST", `${b.P}/service-actors`, { key: b.manager, body: { name: "b-bot" } })).body.data

      // Baselines: ids that do not exist in A's own cell.
      const baselines = [
        yield* request("GET", `${a.P}/users/user_doesnotexist`, { key: a.manager }),
        yield* request("GET", `${a.P}/api-keys/key_doesnotexist`, { key: a.manager }),
        yield* request("GET", `/v1/tenants/ten_doesnotexist`, { key: a.manager })
      ]
      for (const res of baselines) expectErrorCode(res, 404, "resource_missing")
      const expected = shapeOf(baselines[0]!)
      for (const res of baselines) expect(shapeOf(res)).toEqual(expected)

      const probes: Array<[string, string, Record<string, unknown>?]> = [
        // B's paths
        ["GET", `/v1/tenants/${b.tenantId}`],
        ["GET", b.P],
        ["GET", `${b.P}/users`],
        ["GET", `${b.P}/users/${userB.id}`],
        ["GET", `${b.P}/api-keys`],
        ["GET", `${b.P}/api-keys/${b.keyId}`],
        ["GET", `${b.P}/api-keys/${b.managerId}`],
        ["GET", `${b.P}/service-actors/${actorB.id}`],
        // B's ids under A's own path
        ["GET", `${a.P}/users/${userB.id}`],
        ["GET", `${a.P}/api-keys/${b.keyId}`],
        ["GET", `${a.P}/service-actors/${actorB.id}`],
        // mutations of B's resources
        ["PATCH", `/v1/tenants/${b.tenantId}`, { name: "pwned" }],
        ["PATCH", `${b.P}/users/${userB.id}`, { display_name: "pwned" }],
        ["PATCH", `${a.P}/users/${userB.id}`, { display_name: "pwned" }],
        ["DELETE", `${b.P}/users/${userB.id}`],
        ["DELETE", `${a.P}/users/${userB.id}`],
        ["POST", `${b.P}/api-keys/${b.keyId}/revoke`],
        ["POST", `${a.P}/api-keys/${b.keyId}/revoke`],
        ["POST", `${b.P}/users`, { external_id: "intruder", display_name: "X" }],
        ["DELETE", `/v1/tenants/${b.tenantId}`],
        ["DELETE", b.P]
      ]
      for (const [method, path, body] of probes) {
        const res = yield* request(method, path, { key: a.manager, ...(body ? { body } : {}) })
        expectErrorCode(res, 404)
        expect(shapeOf(res), `${method} ${path}`).toEqual(expected)
        expect(res.text).not.toContain("b-user")
      }

      // B is untouched: its key works, its user and tenant are as they were.
      const tenantB = yield* request("GET", `/v1/tenants/${b.tenantId}`, { key: b.key })
      expectSingle(tenantB)
      expect(tenantB.body.data.name).toBe("B")
      expect(tenantB.body.data.status).toBe("active")
      const user = yield* request("GET", `${b.P}/users/${userB.id}`, { key: b.manager })
      expectSingle(user)
      expect(user.body.data.display_name).toBe("User b-user")
      const users = yield* request("GET", `${b.P}/users`, { key: b.manager })
      expect(users.body.items.map((u: any) => u.external_id)).toEqual(["b-user"])
      const keyB = yield* request("GET", `${b.P}/api-keys/${b.keyId}`, { key: b.manager })
      expect(keyB.body.data.status).toBe("active")
      expectSingle(yield* request("GET", b.P, { key: b.key }))

      // And A's lists show only A's resources.
      const keysA = yield* request("GET", `${a.P}/api-keys`, { key: a.manager })
      expect(keysA.body.items.map((k: any) => k.id).sort()).toEqual([a.keyId, a.managerId].sort())
      const tenantsA = yield* request("GET", "/v1/tenants", { key: a.manager })
      expect(tenantsA.body.items.map((t: any) => t.id)).toEqual([a.tenantId])
    }))
})
