/**
 * A mutation that skips its idempotency gate does not compile (issue 37): a capability's mutations
 * take their principal `Gated`, which only `inCell`/`inTenant` (past the gate) and the operator
 * plane's `byOperator` give. The checks below are types, enforced by `npm run typecheck` (CI runs
 * it): an `@ts-expect-error` that no longer finds its error fails the typecheck.
 */
import { describe, expect, it } from "@effect/vitest"

import { byOperator, type CellRequest, inCell } from "../src/Kernel/Policy.js"
import type { Principal } from "../src/Kernel/Principal.js"
import type { Runs } from "../src/Runs.js"

/** The service (an `Effect.Service` class is its own shape). */
type RunsService = Runs
type CreateRunBody = Parameters<RunsService["createRun"]>[2]

/** Never called: what compiles and what does not. */
export const typeChecks = (runs: RunsService, plain: Principal, body: CreateRunBody) => {
  // @ts-expect-error a principal that did not pass the gate cannot start a run
  runs.createRun(plain, "conv_1", body, undefined)
  // @ts-expect-error nor cancel one
  runs.cancelRun(plain, "run_1")
  // reads take any principal
  runs.getRun(plain, "run_1")
  // a handler built with inCell is given its principal gated
  return inCell((p, request: CellRequest & { readonly payload: CreateRunBody }) => runs.createRun(p, "conv_1", request.payload, undefined))
}

describe("the idempotency gate in the types", () => {
  it("the operator plane's principal is the cell it names, branded, nothing else", () => {
    const cell = { tenantId: "ten_1", environment: "sandbox" as const }
    expect(byOperator(cell)).toBe(cell)
  })
})
