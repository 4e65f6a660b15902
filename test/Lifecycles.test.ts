/**
 * The lifecycles of approvals, dispatched writes and connections are data (src/Domain): every row
 * of each table, and what is refused. The run's own table is tested in RunState.test.ts; here also
 * the times its transitions stamp.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { APPROVAL_TRANSITIONS, approvalTransition } from "../src/Domain/Approvals.js"
import * as RunState from "../src/Domain/RunState.js"
import { CONNECTION_TRANSITIONS, connectionTransition, OPERATION_TRANSITIONS, operationTransition } from "../src/Domain/Tools.js"

describe("run transitions stamp their times", () => {
  it("a start stamps started_at; entering a terminal status stamps completed_at; nothing else stamps", () => {
    const stamps = (from: RunState.RunStatus, trigger: RunState.Trigger) => Either.getOrThrow(RunState.transition(from, trigger)).stamps
    expect(stamps("queued", RunState.Trigger.Start())).toEqual(["started_at"])
    expect(stamps("running", RunState.Trigger.Message())).toEqual([])
    expect(stamps("running", RunState.Trigger.Succeed())).toEqual(["completed_at"])
    expect(stamps("queued", RunState.Trigger.Fail({ reason: "authorization_revoked" }))).toEqual(["completed_at"])
    expect(stamps("cancel_requested", RunState.Trigger.CompleteCancel())).toEqual(["completed_at"])
    expect(stamps("running", RunState.Trigger.Cancel())).toEqual([])
    // a receipt keeps outcome_unknown: no status change, no new completion time
    expect(stamps("outcome_unknown", RunState.Trigger.Reconcile())).toEqual([])
    expect(Either.getOrThrow(RunState.transition("outcome_unknown", RunState.Trigger.Reconcile())).changed).toBe(false)
  })
})

describe("approval lifecycle", () => {
  it("only a pending approval changes: approve, deny or expire", () => {
    expect(approvalTransition({ _tag: "Decide", decision: "approve" })).toEqual({ to: "approved", from: ["pending"] })
    expect(approvalTransition({ _tag: "Decide", decision: "deny" })).toEqual({ to: "denied", from: ["pending"] })
    expect(approvalTransition({ _tag: "Expire" })).toEqual({ to: "expired", from: ["pending"] })
    expect(APPROVAL_TRANSITIONS.every((t) => t.from === "pending")).toBe(true)
  })
})

describe("dispatched write lifecycle", () => {
  it("a dispatched or unknown write settles to its outcome or becomes unknown; only an unknown one is postponed", () => {
    for (const outcome of ["succeeded", "failed", "not_found"] as const) {
      expect(operationTransition({ _tag: "Settle", outcome })).toEqual({ to: outcome, from: ["dispatched", "unknown"], settled: true })
    }
    expect(operationTransition({ _tag: "LoseOutcome" })).toEqual({ to: "unknown", from: ["dispatched", "unknown"], settled: false })
    expect(operationTransition({ _tag: "Postpone" })).toEqual({ to: "unknown", from: ["unknown"], settled: false })
    // a settled write never changes again
    for (const row of OPERATION_TRANSITIONS) {
      for (const settled of ["succeeded", "failed", "not_found"]) expect(row.from).not.toContain(settled)
    }
  })
})

describe("connection lifecycle", () => {
  it("a pending connection is approved (making tools) or rejected; a reviewed one is not reviewed again", () => {
    expect(connectionTransition("pending_review", { _tag: "Review", decision: "approve" }))
      .toMatchObject({ to: "active", makesTools: true })
    expect(connectionTransition("pending_review", { _tag: "Review", decision: "reject" }))
      .toMatchObject({ to: "rejected", makesTools: false })
    for (const status of ["active", "rejected"] as const) {
      for (const decision of ["approve", "reject"] as const) {
        expect(connectionTransition(status, { _tag: "Review", decision })).toBeUndefined()
      }
    }
    expect(CONNECTION_TRANSITIONS).toHaveLength(2)
  })
})
