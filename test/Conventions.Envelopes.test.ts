/**
 * Conventions every public API response keeps: the envelopes (contract 2.2, D3) of single
 * resources, 202s, lists and errors, and the headers on every response (contract 4, D4):
 * Cache-Control, X-Request-Id (generated, or the client's echoed) and RateLimit.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp, OPERATOR_TOKEN } from "./support/App.js"
import { operator, type Reply, request } from "./support/Client.js"
import { expectCommonHeaders, expectErrorCode, expectList, expectSingle, REQUEST_ID } from "./support/Envelopes.js"
import { createUser, sandboxWithManager } from "./support/Sandboxes.js"

const expectRateLimitHeaders = (res: Reply) => {
  expect(res.headers.get("ratelimit-policy")).toMatch(/^"burst";q=120;w=\d+$/)
  expect(res.headers.get("ratelimit")).toMatch(/^"burst";r=\d+;t=\d+$/)
}

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
      expectErrorCode(yield* request("GET", `${sb.P}/users/user_missing`, { key: sb.manager }), 404, "resource_missing")
      const badLimit = yield* request("GET", `${sb.P}/users?limit=0`, { key: sb.manager })
      expectErrorCode(badLimit, 400)
      expect(badLimit.body.error.param).toBe("limit")
      expectErrorCode(yield* request("GET", "/v1/tenants"), 401, "missing_api_key")
      expectErrorCode(yield* request("GET", `${sb.P}/users`, { key: sb.key }), 403, "missing_scope")
    }))

  it.effect("unknown routes get the same envelope (404 route_not_found) with X-Request-Id", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithManager()
      expectErrorCode(yield* request("GET", "/nope"), 404, "route_not_found")
      expectErrorCode(yield* request("POST", "/nope/deeper", { body: {} }), 404, "route_not_found")
      expectErrorCode(yield* request("GET", "/v1/nope", { key: sb.key }), 404, "route_not_found")
      expectErrorCode(yield* request("GET", `${sb.P}/no-such-group`, { key: sb.key }), 404, "route_not_found")
      // A known path with an undeclared method: 405 with Allow (issue 15; test/Routing.test.ts).
      expectErrorCode(yield* request("PUT", `/v1/tenants/${sb.tenantId}`, { key: sb.manager, body: {} }), 405, "method_not_allowed")
      // Routing is case-sensitive like the /v1 gate: /V1 is not /v1.
      expectErrorCode(yield* request("GET", "/V1/tenants", { key: sb.key }), 404, "route_not_found")
      // Routing comes before the key (issue 15, D19): without one, still 404.
      expectErrorCode(yield* request("GET", "/v1/nope"), 404, "route_not_found")
    }))

  it.effect("a 401 carries the envelope and request_id = X-Request-Id", () =>
    Effect.gen(function*() {
      const res = yield* request("GET", "/v1/tenants", { key: "sk_nope" })
      expectErrorCode(res, 401, "invalid_api_key")
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
        for (
          const res of [
            yield* request("GET", "/v1/tenants", { key: sb.key, headers: { "x-request-id": bad } }),
            yield* request("GET", "/v1/tenants", { headers: { "x-request-id": bad } }),
            yield* request("GET", "/nope", { headers: { "x-request-id": bad } })
          ]
        ) {
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
      for (
        const res of [
          yield* request("GET", "/v1/tenants", { key: sb.key }),
          yield* request("GET", `${sb.P}/users?limit=0`, { key: sb.manager }),
          yield* request("GET", `${sb.P}/users`, { key: sb.key }),
          yield* request("GET", `${sb.P}/users/user_missing`, { key: sb.manager }),
          yield* request("GET", "/v1/nope", { key: sb.key }),
          yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: { external_id: "rl", display_name: "RL" } }),
          yield* request("POST", `${sb.P}/users`, { key: sb.manager, body: {}, idempotencyKey: false })
        ]
      ) {
        expectCommonHeaders(res)
        expectRateLimitHeaders(res)
      }
      // The state counts down within a burst: b spends one request, and the bucket refills at
      // 60/s meanwhile, so b is at most a - 1 plus what refilled between the two decisions (both
      // fall inside [before a was sent, after b answered]; a loaded machine may take > 17 ms).
      const before = Date.now()
      const a = yield* request("GET", "/v1/tenants", { key: sb.key })
      const b = yield* request("GET", "/v1/tenants", { key: sb.key })
      const refilled = Math.ceil((Date.now() - before) * 60 / 1000)
      const remaining = (r: Reply) => Number(/r=(\d+)/.exec(r.headers.get("ratelimit")!)![1])
      expect(remaining(a)).toBeLessThan(120)
      expect(remaining(b)).toBeLessThanOrEqual(remaining(a) - 1 + refilled)
    }))
})
