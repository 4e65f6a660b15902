import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { provisionSandbox, request } from "./support/Client.js"

describe("smoke", () => {
  it.live("a new customer lists its tenant with the first key", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const res = yield* request("GET", "/v1/tenants", { key: sb.key })
      expect(res.status).toBe(200)
      expect(res.body.items.map((t: any) => t.id)).toEqual([sb.tenantId])
      expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
    }).pipe(Effect.provide(makeTestApp())))
})
