/**
 * Cross-cutting conventions of the public API: envelopes (contract 2.2, D3), headers (contract 4,
 * D4), the status/type mapping of D3, tenant isolation, scopes and revocation (contract 5, 4 rule
 * 5), the OpenAPI document (contract 9, D1) and the operator plane's separation (D1).
 */
import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { QUICKSTART_SCOPES } from "../src/Kernel/Scopes.js"
import * as KeySecrets from "../src/Platform/KeySecrets.js"
import { makeTestApp, OPERATOR_TOKEN } from "./support/App.js"
import { ALL_MANAGEMENT_SCOPES, createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/
const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found",
  409: "conflict",
  410: "gone",
  429: "rate_limited",
  503: "unavailable"
}

const keysOf = (o: unknown) => Object.keys(o as object).sort()

/** Headers every response carries (D4). */
const expectCommonHeaders = (res: Reply) => {
  expect(res.headers.get("cache-control")).toBe("no-store")
  expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID)
}

/** `{data, request_id}` and nothing else; request_id = X-Request-Id. */
const expectSingle = (res: Reply, status = 200) => {
  expect(res.status, res.text).toBe(status)
  expectCommonHeaders(res)
  expect(keysOf(res.body)).toEqual(["data", "request_id"])
  expect(res.body.data).toBeTypeOf("object")
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
}

/** `{items, next_cursor, request_id}` and nothing else. */
const expectList = (res: Reply) => {
  expect(res.status, res.text).toBe(200)
  expectCommonHeaders(res)
  expect(keysOf(res.body)).toEqual(["items", "next_cursor", "request_id"])
  expect(Array.isArray(res.body.items)).toBe(true)
  expect(res.body.next_cursor === null || typeof res.body.next_cursor === "string").toBe(true)
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
}

/** `{error:{type,code,message,param?}, request_id}` and nothing else, with the D3 type of the status. */
const expectError = (res: Reply, status: number, code?: string) => {
  expect(res.status, res.text).toBe(status)
  expectCommonHeaders(res)
  expect(res.headers.get("content-type")).toMatch(/^application\/json/)
  expect(keysOf(res.body)).toEqual(["error", "request_id"])
  const errorKeys = keysOf(res.body.error)
  expect(["code,message,param,type", "code,message,type"]).toContain(errorKeys.join(","))
  expect(res.body.error.type).toBe(ERROR_TYPES[status])
  expect(res.body.error.code).toBeTypeOf("string")
  expect(res.body.error.code.length).toBeGreaterThan(0)
  expect(res.body.error.message).toBeTypeOf("string")
  expect(res.body.error.message.length).toBeGreaterThan(0)
  if ("param" in res.body.error) expect(res.body.error.param).toBeTypeOf("string")
  if (code !== undefined) expect(res.body.error.code).toBe(code)
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
}

/** The "shape" D3 compares across 404s: status, type, code, keys of the body and of the error. */
const shapeOf = (res: Reply) => ({
  status: res.status,
  keys: keysOf(res.body),
  errorKeys: keysOf(res.body.error),
  type: res.body.error.type,
  code: res.body.error.code
})

const expectRateLimitHeaders = (res: Reply) => {
  expect(res.headers.get("ratelimit-policy")).toMatch(/^"burst";q=120;w=\d+$/)
  expect(res.headers.get("ratelimit")).toMatch(/^"burst";r=\d+;t=\d+$/)
}

/** A sandbox with a management key (all platform scopes) beside its first (quickstart) key. */
const sandboxWithManager = (organization = "Acme") =>
  Effect.gen(function*() {
    const sb = yield* provisionSandbox(undefined, organization)
    const manager = yield* createKey(sb.tenantId, ALL_MANAGEMENT_SCOPES, "manager")
    return { ...sb, manager: manager.secret, managerId: manager.id }
  })

const createUser = (P: string, key: string, externalId: string) =>
  Effect.map(
    request("POST", `${P}/users`, { key, body: { external_id: externalId, display_name: `User ${externalId}` } }),
    (r) => {
      if (r.status !== 201) throw new Error(`user creation failed: ${r.status} ${r.text}`)
      return r.body.data as { id: string }
    }
  )

layer(makeTestApp(), { excludeTestServices: true })("envelopes (contract 2.2, D3)", (it) => {
  it.effect("single resources are exactly {data, request_id}", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const tenant = yield* request("GET", `/v1/tenants/${sb.tenantId}`, { key: sb.key })
      expectSingle(tenant)
      expect(tenant.body.data.id).toBe(sb.tenantId)

      const env = yield* request("GET", sb.P, { key: sb.key })
      expectSingle(env)
      expect(env.body.data.name).toBe("sandbox")

      const created = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "u-1", display_name: "One" }
      })
      expectSingle(created, 201)
      const fetched = yield* request("GET", `${sb.P}/users/${created.body.data.id}`, { key: sb.manager })
      expectSingle(fetched)
      expect(fetched.body.data).toEqual(created.body.data)
      // Each response has its own request id.
      expect(fetched.body.request_id).not.toBe(created.body.request_id)
    }))

  it.effect("202 responses are {data, request_id} with a Location to poll", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const user = yield* createUser(sb.P, sb.manager, "to-delete")
      const res = yield* request("DELETE", `${sb.P}/users/${user.id}`, { key: sb.manager })
      expectSingle(res, 202)
      expect(res.body.data.object).toBe("deletion_job")
      const location = res.headers.get("location")
      expect(location).toBe(`${sb.P}/deletion-jobs/${res.body.data.id}`)
      const job = yield* request("GET", location!, { key: sb.manager })
      expectSingle(job)
      expect(job.body.data.id).toBe(res.body.data.id)
    }))

  it.effect("lists are exactly {items, next_cursor, request_id}, paging with next_cursor", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const tenants = yield* request("GET", "/v1/tenants", { key: sb.key })
      expectList(tenants)
      expect(tenants.body.next_cursor).toBeNull()

      for (const id of ["a", "b", "c"]) yield* createUser(sb.P, sb.manager, id)
      const first = yield* request("GET", `${sb.P}/users?limit=2`, { key: sb.manager })
      expectList(first)
      expect(first.body.items).toHaveLength(2)
      expect(first.body.next_cursor).toBeTypeOf("string")
      const second = yield* request("GET", `${sb.P}/users?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`, {
        key: sb.manager
      })
      expectList(second)
      expect(second.body.items).toHaveLength(1)
      expect(second.body.next_cursor).toBeNull()
      const ids = [...first.body.items, ...second.body.items].map((u: any) => u.external_id).sort()
      expect(ids).toEqual(["a", "b", "c"])

      // An empty list is still the full envelope (a new sandbox has no users).
      const fresh = yield* sandboxWithManager("Fresh")
      const empty = yield* request("GET", `${fresh.P}/users`, { key: fresh.manager })
      expectList(empty)
      expect(empty.body.items).toEqual([])
      expect(empty.body.next_cursor).toBeNull()
    }))

  it.effect("errors are exactly {error:{type,code,message,param?}, request_id}", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      expectError(yield* request("GET", `${sb.P}/users/user_missing`, { key: sb.manager }), 404, "resource_missing")
      const badLimit = yield* request("GET", `${sb.P}/users?limit=0`, { key: sb.manager })
      expectError(badLimit, 400)
      expect(badLimit.body.error.param).toBe("limit")
      expectError(yield* request("GET", "/v1/tenants"), 401, "missing_api_key")
      expectError(yield* request("GET", `${sb.P}/users`, { key: sb.key }), 403, "missing_scope")
    }))

  it.effect("unknown routes get the same envelope (404 route_not_found) with X-Request-Id", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      expectError(yield* request("GET", "/nope"), 404, "route_not_found")
      expectError(yield* request("POST", "/nope/deeper", { body: {} }), 404, "route_not_found")
      expectError(yield* request("GET", "/v1/nope", { key: sb.key }), 404, "route_not_found")
      expectError(yield* request("GET", `${sb.P}/no-such-group`, { key: sb.key }), 404, "route_not_found")
      // A known path with an undeclared method is not a route either.
      expectError(yield* request("PUT", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, body: {} }), 404, "route_not_found")
      // Routing is case-sensitive like the /v1 gate: /V1 is not /v1.
      expectError(yield* request("GET", "/V1/tenants", { key: sb.key }), 404, "route_not_found")
      // Under /v1 the key is checked first: without one, 401 (still the envelope).
      expectError(yield* request("GET", "/v1/nope"), 401, "missing_api_key")
    }))

  it.effect("a 401 carries the envelope and request_id = X-Request-Id", () =>
    Effect.gen(function*() {
      const res = yield* request("GET", "/v1/tenants", { key: "sk_nope" })
      expectError(res, 401, "invalid_api_key")
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("headers on every response (contract 4, D4)", (it) => {
  it.effect("Cache-Control: no-store and X-Request-Id everywhere", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const pilot = yield* operator("POST", "/pilot-applications", { organization_name: "Other", contact_email: "a@b.co" })
      expect(pilot.status).toBe(201)
      const replies: Array<[string, Reply, number]> = [
        ["success", yield* request("GET", "/v1/tenants", { key: sb.key }), 200],
        ["201", yield* request("POST", `${sb.P}/service-actors`, { key: sb.manager, body: { name: "bot" } }), 201],
        ["400", yield* request("GET", `${sb.P}/users?limit=abc`, { key: sb.manager }), 400],
        ["401", yield* request("GET", "/v1/tenants"), 401],
        ["403", yield* request("GET", `${sb.P}/users`, { key: sb.key }), 403],
        ["404", yield* request("GET", `${sb.P}/users/user_missing`, { key: sb.manager }), 404],
        ["unknown route", yield* request("GET", "/nope"), 404],
        ["unknown /v1 route", yield* request("GET", "/v1/nope", { key: sb.key }), 404],
        ["/healthz", yield* request("GET", "/healthz"), 200],
        ["/readyz", yield* request("GET", "/readyz"), 200],
        ["/v1/openapi.json", yield* request("GET", "/v1/openapi.json"), 200],
        ["/docs", yield* request("GET", "/docs"), 200],
        ["operator 201", pilot, 201],
        ["operator 200", yield* operator("GET", `/pilot-applications/${pilot.body.id}`), 200],
        ["operator 404", yield* operator("GET", "/pilot-applications/pilot_missing"), 404],
        ["operator 401", yield* request("GET", `/operator/v1/pilot-applications/${pilot.body.id}`), 401]
      ]
      const ids = new Set<string>()
      for (const [label, res, status] of replies) {
        expect(res.status, `${label}: ${res.text.slice(0, 200)}`).toBe(status)
        expect(res.headers.get("cache-control"), label).toBe("no-store")
        const id = res.headers.get("x-request-id")
        expect(id, label).toMatch(REQUEST_ID)
        ids.add(id!)
        if (res.body !== undefined && typeof res.body === "object" && "request_id" in res.body) {
          expect(res.body.request_id, label).toBe(id)
        }
      }
      // Generated ids are unique per response.
      expect(ids.size).toBe(replies.length)
    }))

  it.effect("a valid client X-Request-Id is echoed, on success and on errors", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const max = "a".repeat(120) + "._-AZ09z"
      expect(max).toHaveLength(128)
      const cases: Array<[string, Effect.Effect<Reply, never, any>]> = [
        ["client.req_ID-1", request("GET", "/v1/tenants", { key: sb.key, headers: { "x-request-id": "client.req_ID-1" } })],
        [max, request("GET", "/v1/tenants", { key: sb.key, headers: { "x-request-id": max } })],
        ["err-401", request("GET", "/v1/tenants", { headers: { "x-request-id": "err-401" } })],
        ["err-404", request("GET", "/nope", { headers: { "x-request-id": "err-404" } })],
        ["err-400", request("GET", `${sb.P}/users?limit=0`, { key: sb.manager, headers: { "x-request-id": "err-400" } })],
        ["health.1", request("GET", "/healthz", { headers: { "x-request-id": "health.1" } })],
        ["op-1", request("GET", "/operator/v1/pilot-applications/x", { key: OPERATOR_TOKEN, headers: { "x-request-id": "op-1" } })]
      ]
      for (const [sent, effect] of cases) {
        const res = yield* effect
        expectCommonHeaders(res)
        expect(res.headers.get("x-request-id")).toBe(sent)
        if (res.body && typeof res.body === "object" && "request_id" in res.body) expect(res.body.request_id).toBe(sent)
      }
      const created = yield* request("POST", `${sb.P}/users`, {
        key: sb.manager,
        body: { external_id: "echo", display_name: "Echo" },
        headers: { "x-request-id": "create-echo" }
      })
      expectSingle(created, 201)
      expect(created.body.request_id).toBe("create-echo")
    }))

  it.effect("an invalid client X-Request-Id is replaced by a generated one", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const bad of ["has space", "semi;colon", "slash/id", "quote\"d", "a".repeat(129), ""]) {
        for (const res of [
          yield* request("GET", "/v1/tenants", { key: sb.key, headers: { "x-request-id": bad } }),
          yield* request("GET", "/v1/tenants", { headers: { "x-request-id": bad } }),
          yield* request("GET", "/nope", { headers: { "x-request-id": bad } })
        ]) {
          const id = res.headers.get("x-request-id")
          expect(id).not.toBe(bad)
          expect(id).toMatch(REQUEST_ID)
          expect(res.body.request_id).toBe(id)
        }
      }
    }))

  it.effect("RateLimit-Policy and RateLimit on authenticated /v1 responses, errors included", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const res of [
        yield* request("GET", "/v1/tenants", { key: sb.key }),
        yield* request("GET", `${sb.P}/users?limit=0`, { key: sb.manager }),
        yield* request("GET", `${sb.P}/users`, { key: sb.key }),
        yield* request("GET", `${sb.P}/users/user_missing`, { key: sb.manager }),
        yield* request("GET", "/v1/nope", { key: sb.key }),
        yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "rl", display_name: "RL" } }),
        yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: {}, idempotencyKey: false })
      ]) {
        expectCommonHeaders(res)
        expectRateLimitHeaders(res)
      }
      // The state counts down within a burst.
      const a = yield* request("GET", "/v1/tenants", { key: sb.key })
      const b = yield* request("GET", "/v1/tenants", { key: sb.key })
      const remaining = (r: Reply) => Number(/r=(\d+)/.exec(r.headers.get("ratelimit")!)![1])
      expect(remaining(a)).toBeLessThan(120)
      expect(remaining(b)).toBeLessThanOrEqual(remaining(a))
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("D3 status and type mapping", (it) => {
  it.effect("400 invalid_request: limit outside 1..100 or not an integer", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const limit of ["0", "101", "abc", "1.5", "-1", ""]) {
        for (const list of [`${sb.P}/users`, `${sb.P}/api-keys`, `${sb.P}/service-actors`, "/v1/tenants"]) {
          const key = list === "/v1/tenants" ? sb.key : sb.manager
          const res = yield* request("GET", `${list}?limit=${limit}`, { key })
          expectError(res, 400)
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

      for (const [path, key] of [
        [`${sb.P}/users?cursor=garbage`, sb.manager],
        [`${sb.P}/users?cursor=${encodeURIComponent(Buffer.from("{\"l\":\"users\"}").toString("base64url"))}`, sb.manager],
        [`${sb.P}/api-keys?cursor=${encodeURIComponent(cursor)}`, sb.manager],
        [`${sb.P}/service-actors?cursor=${encodeURIComponent(cursor)}`, sb.manager],
        [`${sb.P}/users?cursor=${encodeURIComponent(foreign)}`, sb.manager]
      ] as const) {
        const res = yield* request("GET", path, { key })
        expectError(res, 400, "invalid_cursor")
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
        expectError(res, 400)
        expect(res.body.error.param).toBe("environment")
      }
      expectError(yield* request("POST", `${base}/users`, { key: sb.manager, body: { external_id: "x", display_name: "X" } }), 400)
    }))

  it.effect("path identifiers: 1..128 chars are looked up, 129 chars are 400", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      for (const length of [101, 128]) {
        const id = "x".repeat(length)
        expectError(yield* request("GET", `/v1/tenants/${id}`, { key: sb.key }), 404, "resource_missing")
        expectError(yield* request("GET", `${sb.P}/users/${id}`, { key: sb.manager }), 404, "resource_missing")
        expectError(yield* request("GET", `${sb.P}/api-keys/${id}`, { key: sb.manager }), 404, "resource_missing")
      }
      const long = "x".repeat(129)
      for (const [path, param] of [
        [`/v1/tenants/${long}`, "tenant_id"],
        [`/v1/tenants/${long}/environments`, "tenant_id"],
        [`${sb.P}/users/${long}`, "user_id"],
        [`${sb.P}/api-keys/${long}`, "key_id"],
        [`${sb.P}/service-actors/${long}`, "service_actor_id"]
      ] as const) {
        const res = yield* request("GET", path, { key: sb.manager })
        expectError(res, 400)
        expect(res.body.error.param, path).toBe(param)
      }
      expectError(yield* request("POST", `${sb.P}/api-keys/${long}/revoke`, { key: sb.manager }), 400)
      expectError(yield* request("GET", `/v1/tenants/${"y".repeat(2000)}`, { key: sb.key }), 400)
    }))

  it.effect("400 for a body that is not JSON or fails validation", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      expectError(yield* request("POST", `${sb.P}/users`, { key: sb.manager, rawBody: "{not json" }), 400)
      expectError(yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, rawBody: "[1," }), 400)
      expectError(yield* request("POST", `${sb.P}/users`, { key: sb.manager, rawBody: "" }), 400)
      // The operator plane too.
      const op = yield* request("POST", "/operator/v1/pilot-applications", { key: OPERATOR_TOKEN, rawBody: "{\"organization_name\":" })
      expectError(op, 400)
      const missing = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "x" } })
      expectError(missing, 400)
      expect(missing.body.error.param).toBe("display_name")
      expectError(yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: 7, display_name: "X" } }), 400)
      // Nothing was created.
      const users = yield* request("GET", `${sb.P}/users`, { key: sb.manager })
      expect(users.body.items).toEqual([])
    }))

  it.effect("400 idempotency_key_required / bad Idempotency-Key on mutations", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const body = { external_id: "idem", display_name: "Idem" }
      const missing = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body, idempotencyKey: false })
      expectError(missing, 400, "idempotency_key_required")
      expect(missing.body.error.param).toBe("Idempotency-Key")
      expectError(yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, body: { name: "N" }, idempotencyKey: false }), 400, "idempotency_key_required")
      expectError(yield* request("DELETE", `${sb.P}/users/user_x`, { key: sb.manager, idempotencyKey: false }), 400, "idempotency_key_required")
      expectError(yield* request("POST", `${sb.P}/api-keys/${sb.keyId}/revoke`, { key: sb.manager, idempotencyKey: false }), 400, "idempotency_key_required")
      for (const bad of ["has space", "a".repeat(256), "tab\tin"]) {
        const res = yield* request("POST", `${sb.P}/users`, { key: sb.manager, body, idempotencyKey: bad })
        expectError(res, 400)
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
        expectError(yield* request("GET", path), 401, "missing_api_key")
        expectError(yield* request("GET", path, { key: "garbage" }), 401, "invalid_api_key")
        expectError(yield* request("GET", path, { key: KeySecrets.generate("sandbox") }), 401, "invalid_api_key")
        expectError(yield* request("GET", path, { key: KeySecrets.generate("production") }), 401, "invalid_api_key")
        // A known key with one character changed is unknown.
        const flipped = sb.key.slice(0, -1) + (sb.key.endsWith("A") ? "B" : "A")
        expectError(yield* request("GET", path, { key: flipped }), 401, "invalid_api_key")
      }
      // Mutations are refused before anything else.
      expectError(yield* request("POST", `${sb.P}/users`, { body: { external_id: "x", display_name: "X" } }), 401, "missing_api_key")
    }))

  it.effect("403 permission_error missing_scope for the first key outside its abilities", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const list = yield* request("GET", `${sb.P}/users`, { key: sb.key })
      expectError(list, 403, "missing_scope")
      expect(list.body.error.message).toContain("users:read")
      const create = yield* request("POST", `${sb.P}/users`, { key: sb.key, body: { external_id: "q", display_name: "Q" } })
      expectError(create, 403, "missing_scope")
      expect(create.body.error.message).toContain("users:write")
      const revoke = yield* request("POST", `${sb.P}/api-keys/${sb.managerId}/revoke`, { key: sb.key })
      expectError(revoke, 403, "missing_scope")
      expect(revoke.body.error.message).toContain("keys:revoke")
      expectError(yield* request("GET", `${sb.P}/api-keys`, { key: sb.key }), 403, "missing_scope")
      expectError(yield* request("PATCH", `/v1/tenants/${sb.tenantId}`, { key: sb.key, body: { name: "x" } }), 403, "missing_scope")
      // The refused calls changed nothing.
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).body.items).toEqual([])
      expectList(yield* request("GET", "/v1/tenants", { key: sb.manager }))
    }))

  it.effect("404 not_found: another tenant's id and the other environment look like a missing resource", () =>
    Effect.gen(function*() {
      const a = yield* sandboxWithManager("A")
      const b = yield* sandboxWithManager("B")
      const ownMissing = yield* request("GET", `${a.P}/users/user_doesnotexist`, { key: a.manager })
      expectError(ownMissing, 404, "resource_missing")
      const expected = shapeOf(ownMissing)
      for (const path of [
        `/v1/tenants/${b.tenantId}`,
        `/v1/tenants/${b.tenantId}/environments`,
        `/v1/tenants/ten_doesnotexist`,
        `/v1/tenants/${a.tenantId}/environments/production`,
        `/v1/tenants/${a.tenantId}/environments/production/users`,
        `/v1/tenants/${a.tenantId}/environments/production/api-keys`,
        `${a.P}/api-keys/key_doesnotexist`,
        `${a.P}/service-actors/sa_doesnotexist`
      ]) {
        const res = yield* request("GET", path, { key: a.manager })
        expectError(res, 404)
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
      for (const res of baselines) expectError(res, 404, "resource_missing")
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
        expectError(res, 404)
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
      expectError(create, 403, "missing_scope")
      expectError(yield* request("GET", `/v1/tenants/${sb.tenantId}`, { key: reader }), 403, "missing_scope")
      expectError(yield* request("GET", `${sb.P}/api-keys`, { key: reader }), 403, "missing_scope")
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
      expectError(yield* request("DELETE", sb.P, { key: made.body.secret }), 403, "missing_scope")
    }))

  it.effect("operator key creation naming an unknown scope is 400 and creates nothing", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const before = (yield* request("GET", `${sb.P}/api-keys`, { key: sb.manager })).body.items.length
      for (const scopes of [["users:read", "users:admin"], ["nope"], ["USERS:READ"], []]) {
        const res = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "bad", scopes })
        expectError(res, 400)
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
      expectError(yield* request("GET", `${sb.P}/api-keys`, { key: k.secret }), 401, "key_revoked")
      expectError(yield* request("GET", `${sb.P}/users`, { key: childSecret }), 401, "key_revoked")
      expectError(yield* request("GET", `${sb.P}/users`, { key: grandSecret }), 401, "key_revoked")
      expectError(yield* request("POST", `${sb.P}/api-keys/${m.id}/revoke`, { key: k.secret }), 401, "key_revoked")
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
        expectError(yield* request("POST", `${sb.P}/api-keys/${target}/revoke`, { key: m.secret }), 403, "outside_management_ceiling")
        const shown = yield* request("GET", `${sb.P}/api-keys/${target}`, { key: m.secret })
        expect(shown.body.data.status).toBe("active")
      }
      expectList(yield* request("GET", "/v1/tenants", { key: sb.key }))
      expectList(yield* request("GET", `${sb.P}/users`, { key: wider.secret }))
      // A missing key is 404, not 403.
      expectError(yield* request("POST", `${sb.P}/api-keys/key_doesnotexist/revoke`, { key: m.secret }), 404, "resource_missing")
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("OpenAPI document and system endpoints (contract 9, D1)", (it) => {
  const CONTRACT: Record<string, [string, string, string, string]> = {
    listTenants: ["get", "/v1/tenants", "tenants:read", "200"],
    getTenant: ["get", "/v1/tenants/{tenant_id}", "tenants:read", "200"],
    updateTenant: ["patch", "/v1/tenants/{tenant_id}", "tenants:write", "200"],
    deleteTenant: ["delete", "/v1/tenants/{tenant_id}", "tenants:write", "202"],
    listEnvironments: ["get", "/v1/tenants/{tenant_id}/environments", "environments:read", "200"],
    getEnvironment: ["get", "/v1/tenants/{tenant_id}/environments/{environment}", "environments:read", "200"],
    deleteEnvironment: ["delete", "/v1/tenants/{tenant_id}/environments/{environment}", "environments:write", "202"],
    listApiKey: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys", "keys:read", "200"],
    getApiKey: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys/{key_id}", "keys:read", "200"],
    revokeApiKey: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys/{key_id}/revoke", "keys:revoke", "200"],
    listUser: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/users", "users:read", "200"],
    createUser: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/users", "users:write", "201"],
    getUser: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:read", "200"],
    updateUser: ["patch", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:write", "200"],
    deleteUser: ["delete", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:write", "202"],
    listServiceActor: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/service-actors", "service-actors:read", "200"],
    createServiceActor: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/service-actors", "service-actors:write", "201"],
    getServiceActor: [
      "get",
      "/v1/tenants/{tenant_id}/environments/{environment}/service-actors/{service_actor_id}",
      "service-actors:read",
      "200"
    ]
  }
  const ERRORS = ["400", "401", "403", "404", "409", "410", "429", "503"]

  const fetchDoc = Effect.map(request("GET", "/v1/openapi.json"), (res) => {
    expect(res.status).toBe(200)
    expectCommonHeaders(res)
    return res.body as any
  })
  const operations = (doc: any) =>
    Object.entries<any>(doc.paths).flatMap(([path, item]) =>
      Object.entries<any>(item)
        .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
        .map(([method, op]) => ({ path, method, op }))
    )

  it.effect("document header: OpenAPI 3.1, info.version 0.1.0-draft.3, ServiceKey bearer", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      expect(doc.openapi).toMatch(/^3\.1/)
      expect(doc.info.version).toBe("0.1.0-draft.3")
      expect(doc.components.securitySchemes.ServiceKey).toMatchObject({ type: "http", scheme: "bearer" })
      expect(Object.keys(doc.components.securitySchemes)).toEqual(["ServiceKey"])
      // Served without a key, and a bad key does not matter.
      const withGarbage = yield* request("GET", "/v1/openapi.json", { key: "garbage" })
      expect(withGarbage.status).toBe(200)
      expect(withGarbage.body.info.version).toBe("0.1.0-draft.3")
    }))

  it.effect("every /v1 operation: stage, visibility, statuses, security; contract operationIds with their scopes", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      const v1 = operations(doc).filter((o) => o.path.startsWith("/v1/"))
      expect(v1.length).toBeGreaterThanOrEqual(Object.keys(CONTRACT).length)
      const byId = new Map(v1.map((o) => [o.op.operationId, o]))
      for (const { path, method, op } of v1) {
        const label = `${method} ${path}`
        expect(op["x-release-stage"], label).toBe("proposed")
        expect(op["x-visibility"], label).toBe("public")
        const statuses = Object.keys(op.responses)
        for (const s of ERRORS) expect(statuses, label).toContain(s)
        // createRun: the durable 202, or 200 with a terminal run under `Prefer: wait` (D7).
        const success = statuses.filter((s) => !ERRORS.includes(s) && !(op.operationId === "createRun" && s === "200"))
        expect(success.length, label).toBe(1)
        expect(success[0], label).toMatch(/^2\d\d$/)
        if (op.operationId === "createRun") expect(statuses, label).toEqual(expect.arrayContaining(["200", "202"]))
        if (op.operationId === "getJwks") {
          // D10: the key set tool servers verify with is public.
          expect(op.security ?? [], label).toEqual([])
        } else {
          expect(op.security, label).toHaveLength(1)
          expect(Object.keys(op.security[0]), label).toEqual(["ServiceKey"])
          // Every operation names its scopes, except polling a deletion job: any key of the
          // environment may follow the Location its delete returned.
          if (op.operationId === "getDeletionJob") expect(op.security[0].ServiceKey, label).toEqual([])
          else expect(op.security[0].ServiceKey.length, label).toBeGreaterThan(0)
        }
        if (success[0] === "202") {
          expect(op.responses["202"].headers?.Location, label).toBeDefined()
        }
        for (const s of ERRORS) {
          expect(op.responses[s].content["application/json"].schema.$ref, `${label} ${s}`).toMatch(/^#\/components\/schemas\//)
        }
        if (["post", "patch", "put", "delete"].includes(method)) {
          const idem = (op.parameters ?? []).find((p: any) => p.in === "header" && p.name === "Idempotency-Key")
          expect(idem, label).toBeDefined()
          expect(idem.required, label).toBe(true)
        }
        // header parameters are named as clients write them (X-Actor-Token, Prefer, Last-Event-ID)
        for (const p of (op.parameters ?? []).filter((p: any) => p.in === "header")) {
          expect(p.name, label).toMatch(/^[A-Z][A-Za-z]*(-[A-Z][A-Za-z]*)*$/)
        }
      }
      for (const [operationId, [method, path, scope, success]] of Object.entries(CONTRACT)) {
        const found = byId.get(operationId)
        expect(found, operationId).toBeDefined()
        expect(found!.method, operationId).toBe(method)
        expect(found!.path, operationId).toBe(path)
        expect(found!.op.security, operationId).toEqual([{ ServiceKey: [scope] }])
        expect(Object.keys(found!.op.responses), operationId).toContain(success)
        if (operationId.startsWith("list")) {
          const names = (found!.op.parameters ?? []).filter((p: any) => p.in === "query").map((p: any) => p.name).sort()
          expect(names, operationId).toEqual(["cursor", "limit"])
          const limit = found!.op.parameters.find((p: any) => p.in === "query" && p.name === "limit")
          expect(limit.schema, operationId).toMatchObject({ type: "integer", minimum: 1, maximum: 100, default: 50 })
        }
      }
      // The error responses document the D3 envelope.
      const err = doc.components.schemas.InvalidRequestError
      expect(err.required.sort()).toEqual(["error", "request_id"])
      expect(Object.keys(err.properties).sort()).toEqual(["error", "request_id"])
    }))

  it.effect("no HttpApiDecodeError, no dangling $ref, no operator paths", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      const text = JSON.stringify(doc)
      expect(text).not.toContain("HttpApiDecodeError")
      const refs = new Set([...text.matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]!))
      for (const ref of refs) expect(doc.components.schemas, ref).toHaveProperty([ref])
      for (const path of Object.keys(doc.paths)) expect(path.startsWith("/operator")).toBe(false)
      expect(text).not.toContain("/operator/")
      expect(text).not.toContain("OperatorToken")
      const ids = operations(doc).map((o) => o.op.operationId)
      for (const hidden of ["submitPilotApplication", "approvePilotApplication", "operatorCreateApiKey"]) {
        expect(ids).not.toContain(hidden)
      }
      expect(new Set(ids).size).toBe(ids.length)
    }))

  it.effect("/docs is an HTML page; /healthz and /readyz answer 200 {status:\"ok\"} without a key", () =>
    Effect.gen(function*() {
      const docs = yield* request("GET", "/docs")
      expect(docs.status).toBe(200)
      expect(docs.headers.get("content-type")).toMatch(/^text\/html/)
      expect(docs.text.toLowerCase()).toContain("<html")
      expectCommonHeaders(docs)
      for (const path of ["/healthz", "/readyz"]) {
        const res = yield* request("GET", path)
        expect(res.status, path).toBe(200)
        expect(res.body).toEqual({ status: "ok" })
        expectCommonHeaders(res)
      }
    }))
})

layer(makeTestApp(), { excludeTestServices: true })("the operator plane is separate (D1)", (it) => {
  it.effect("/operator/v1 rejects no token, a wrong token and a service key with the 401 envelope", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      const body = { organization_name: "Intruder", contact_email: "x@y.co" }
      const keyPath = `/operator/v1/tenants/${sb.tenantId}/environments/sandbox/api-keys`
      for (const key of [undefined, "wrong", `${OPERATOR_TOKEN}x`, OPERATOR_TOKEN.slice(0, -1), sb.key, sb.manager]) {
        expectError(yield* request("POST", "/operator/v1/pilot-applications", { key, body }), 401)
        expectError(yield* request("POST", keyPath, { key, body: { name: "sneaky" } }), 401)
        expectError(yield* request("GET", "/operator/v1/pilot-applications/pilot_x", { key }), 401)
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
      for (const [method, path] of [
        ["GET", "/v1/tenants"],
        ["GET", `/v1/tenants/${sb.tenantId}`],
        ["GET", `${sb.P}/api-keys`],
        ["POST", `${sb.P}/users`]
      ] as const) {
        const res = yield* request(method, path, {
          key: OPERATOR_TOKEN,
          ...(method === "POST" ? { body: { external_id: "op", display_name: "Op" } } : {})
        })
        expectError(res, 401, "invalid_api_key")
      }
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).body.items).toEqual([])
    }))
})

