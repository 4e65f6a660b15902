/**
 * Routing before anything that depends on the key (issue 15, D19): a path no operation has is 404
 * `route_not_found`, and a documented path with a method it does not have is 405
 * `method_not_allowed` with `Allow`, with or without a key, Idempotency-Key or body; never 400
 * `idempotency_key_required`, 401 or 403 first.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

import { makeTestApp } from "./support/App.js"
import { provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode } from "./support/Envelopes.js"

layer(makeTestApp(), { excludeTestServices: true })("routing before authentication (issue 15)", (it) => {
  it.effect("a wrong method on a documented path is 405 with Allow, whatever the key or headers", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(["users:read"])
      const users = `${sb.P}/users`
      for (
        const options of [
          {},
          { key: "sk_test_bogus" },
          { key: sb.key, idempotencyKey: false as const },
          { key: sb.key, body: { external_id: "x" } }
        ]
      ) {
        const res = yield* request("PUT", users, options)
        expectErrorCode(res, 405, "method_not_allowed")
        expect(res.body.error.type).toBe("invalid_request")
        expect(res.headers.get("allow")).toBe("GET, POST, HEAD")
      }
      const tenant = yield* request("POST", `/v1/tenants/${sb.tenantId}`, { key: sb.key })
      expectErrorCode(tenant, 405, "method_not_allowed")
      expect(tenant.headers.get("allow")?.split(", ").sort()).toEqual(["DELETE", "GET", "HEAD", "PATCH"])
      // the document and the key set answer their wrong methods the same way
      expectErrorCode(yield* request("DELETE", "/v1/openapi.json"), 405, "method_not_allowed")
      // the right method still reaches authentication and scopes
      expectErrorCode(yield* request("POST", users, { key: sb.key, body: { external_id: "x", display_name: "X" } }), 403, "missing_scope")
      expect((yield* request("GET", users, { key: sb.key })).status).toBe(200)
    }))

  it.effect("a path no operation has is 404 route_not_found before the key is looked at", () =>
    Effect.gen(function*() {
      for (const method of ["GET", "POST", "DELETE"]) {
        const res = yield* request(method, "/v1/tenants/ten_x/environments/sandbox/nothing-here", {
          key: "sk_test_bogus",
          idempotencyKey: false
        })
        expectErrorCode(res, 404, "route_not_found")
      }
      expectErrorCode(yield* request("GET", "/v1/nothing"), 404, "route_not_found")
    }))
})
