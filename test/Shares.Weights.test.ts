/**
 * A cell's weight (issue 36): the operator sets it (`PUT .../share`), every node reads it into
 * the weights its fair shares grant by (src/Operator/Weights.ts), and the operator's cell view
 * shows it with what the cell holds, awaits and got of each resource of the node.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

import { makeWeights } from "../src/Kernel/Shares.js"
import { applyWeights } from "../src/Operator/Weights.js"
import { makeTestApp } from "./support/App.js"
import { operator, provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode } from "./support/Envelopes.js"

describe("cell weights", () => {
  it("the operator's rows win over CELL_WEIGHTS; a cleared row goes back to it, or to 1", () => {
    const weights = makeWeights()
    const configured = new Map([["ten_a/sandbox", 4], ["ten_b/sandbox", 2]])
    applyWeights(weights, configured, [{ tenant_id: "ten_b", environment: "sandbox", weight: 0.5 }, {
      tenant_id: "ten_c",
      environment: "production",
      weight: 8
    }])
    expect([weights.get("ten_a/sandbox"), weights.get("ten_b/sandbox"), weights.get("ten_c/production")]).toEqual([4, 0.5, 8])
    applyWeights(weights, configured, [])
    expect([weights.get("ten_a/sandbox"), weights.get("ten_b/sandbox"), weights.get("ten_c/production")]).toEqual([4, 2, 1])
  })

  it.live("the operator sets a cell's weight, sees it with the cell's shares, and clears it", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const cell = `/tenants/${sb.tenantId}/environments/sandbox`
      expect((yield* request("GET", `${sb.P}/runs/run_0000000000000000000000000a`, { key: sb.key })).status).toBe(404)
      const before = yield* operator("GET", `${cell}/cell`)
      expect(before.status, before.text).toBe(200)
      expect(before.body.share).toMatchObject({ weight: 1, weight_source: "default" })
      // the cell's request took database connections through its share
      expect(before.body.share.resources.db.grants).toBeGreaterThan(0)
      expect(Object.keys(before.body.share.resources).sort()).toEqual(["bytes", "db", "outbound", "steps"])

      const set = yield* operator("PUT", `${cell}/share`, { weight: 3 })
      expect(set.status, set.text).toBe(200)
      expect(set.body).toMatchObject({ weight: 3, weight_source: "operator" })
      expect((yield* operator("GET", `${cell}/cell`)).body.share).toMatchObject({ weight: 3, weight_source: "operator" })

      expectErrorCode(yield* operator("PUT", `${cell}/share`, { weight: 0 }), 400, "parameter_invalid")
      expectErrorCode(yield* operator("PUT", `${cell}/share`, { weight: 1001 }), 400, "parameter_invalid")
      expect((yield* operator("PUT", `${cell}/share`, { weight: 2, extra: true })).status).toBe(400)
      expect((yield* operator("PUT", `/tenants/ten_unknown/environments/sandbox/share`, { weight: 2 })).status).toBe(404)
      // a key is no operator
      expect((yield* request("PUT", `/operator/v1${cell}/share`, { key: sb.key, body: { weight: 9 } })).status).toBe(401)
      expect((yield* operator("GET", `${cell}/cell`)).body.share.weight).toBe(3)

      const cleared = yield* operator("PUT", `${cell}/share`, { weight: null })
      expect(cleared.body).toMatchObject({ weight: 1, weight_source: "default" })
    }).pipe(Effect.provide(makeTestApp())), 30_000)
})
