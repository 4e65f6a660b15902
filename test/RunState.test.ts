/** The run state machine (contract 3.1, D7, D8) as a table: every row, and everything not in it. */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import {
  isTerminal,
  NON_TERMINAL_STATUSES,
  RunStatus,
  TABLE,
  TERMINAL_STATUSES,
  transition,
  Trigger,
  type Trigger as TriggerType
} from "../src/Domain/RunState.js"

const ALL = RunStatus.literals
const sample: Record<TriggerType["_tag"], TriggerType> = {
  Start: Trigger.Start(),
  Message: Trigger.Message(),
  ToolCallStarted: Trigger.ToolCallStarted(),
  ToolCallCompleted: Trigger.ToolCallCompleted(),
  ToolCallFailed: Trigger.ToolCallFailed(),
  FileCreated: Trigger.FileCreated(),
  FileFailed: Trigger.FileFailed(),
  Succeed: Trigger.Succeed(),
  Fail: Trigger.Fail({ reason: "authorization_revoked" }),
  RequireAction: Trigger.RequireAction(),
  DecideApproval: Trigger.DecideApproval(),
  Cancel: Trigger.Cancel(),
  CompleteCancel: Trigger.CompleteCancel(),
  EnvironmentDeleted: Trigger.EnvironmentDeleted(),
  Expire: Trigger.Expire({ budget: "start_deadline_exceeded" }),
  Interrupt: Trigger.Interrupt({ reason: "admitted_content_missing" }),
  LoseOutcome: Trigger.LoseOutcome({ reason: "write_timeout" }),
  Reconcile: Trigger.Reconcile()
}

/** The contract's rows, written out independently of TABLE: [from, trigger, to, event]. */
const EXPECTED: ReadonlyArray<readonly [string, TriggerType["_tag"], string, string]> = [
  ["queued", "Start", "running", "run.started"],
  // D19: deleting the environment ends every unfinished run at once
  ["queued", "EnvironmentDeleted", "cancelled", "run.cancelled"],
  ["running", "EnvironmentDeleted", "cancelled", "run.cancelled"],
  ["requires_action", "EnvironmentDeleted", "cancelled", "run.cancelled"],
  ["cancel_requested", "EnvironmentDeleted", "cancelled", "run.cancelled"],
  ["running", "Succeed", "succeeded", "run.succeeded"],
  ["running", "Fail", "failed", "run.failed"],
  ["queued", "Fail", "failed", "run.failed"],
  ["requires_action", "Fail", "failed", "run.failed"],
  ["running", "RequireAction", "requires_action", "run.requires_action"],
  ["requires_action", "DecideApproval", "running", "run.approval.decided"],
  ["queued", "Cancel", "cancel_requested", "run.cancel_requested"],
  ["running", "Cancel", "cancel_requested", "run.cancel_requested"],
  ["requires_action", "Cancel", "cancel_requested", "run.cancel_requested"],
  ["cancel_requested", "CompleteCancel", "cancelled", "run.cancelled"],
  ["queued", "Expire", "expired", "run.expired"],
  ["running", "Expire", "expired", "run.expired"],
  ["requires_action", "Expire", "expired", "run.expired"],
  ["cancel_requested", "Expire", "expired", "run.expired"],
  ["queued", "Interrupt", "interrupted", "run.interrupted"],
  ["running", "Interrupt", "interrupted", "run.interrupted"],
  ["requires_action", "Interrupt", "interrupted", "run.interrupted"],
  ["cancel_requested", "Interrupt", "interrupted", "run.interrupted"],
  ["running", "LoseOutcome", "outcome_unknown", "run.outcome_unknown"],
  ["cancel_requested", "LoseOutcome", "outcome_unknown", "run.outcome_unknown"],
  ["outcome_unknown", "Reconcile", "outcome_unknown", "run.reconciled"],
  ["running", "Message", "running", "run.message"],
  ["running", "ToolCallStarted", "running", "run.tool_call.started"],
  ["running", "ToolCallCompleted", "running", "run.tool_call.completed"],
  ["cancel_requested", "ToolCallCompleted", "cancel_requested", "run.tool_call.completed"],
  ["running", "ToolCallFailed", "running", "run.tool_call.failed"],
  ["cancel_requested", "ToolCallFailed", "cancel_requested", "run.tool_call.failed"],
  // D13: a file the agent produced, written with its event while the run works
  ["running", "FileCreated", "running", "run.file.created"],
  // D20: a file that did not fit the storage quota is reported instead, and the run goes on
  ["running", "FileFailed", "running", "run.file.failed"]
]

describe("run state machine", () => {
  it("terminal and non-terminal states partition the ten states (rule 1)", () => {
    expect([...TERMINAL_STATUSES, ...NON_TERMINAL_STATUSES].sort()).toEqual([...ALL].sort())
    for (const s of TERMINAL_STATUSES) expect(isTerminal(s)).toBe(true)
    for (const s of NON_TERMINAL_STATUSES) expect(isTerminal(s)).toBe(false)
  })

  it.each(EXPECTED)("%s --%s--> %s emitting %s", (from, trigger, to, event) => {
    const result = transition(from as RunStatus, sample[trigger])
    expect(Either.isRight(result)).toBe(true)
    const t = Either.getOrThrow(result)
    expect(t.status).toBe(to)
    expect(t.event).toBe(event)
  })

  it("every (state, trigger) pair not in the contract's rows is refused", () => {
    const allowed = new Set(EXPECTED.map(([from, trigger]) => `${from}/${trigger}`))
    let refused = 0
    for (const from of ALL) {
      for (const trigger of Object.values(sample)) {
        const result = transition(from, trigger)
        expect(Either.isRight(result), `${from}/${trigger._tag}`).toBe(allowed.has(`${from}/${trigger._tag}`))
        if (Either.isLeft(result)) {
          refused++
          expect(result.left).toMatchObject({ status: from, trigger: trigger._tag })
        }
      }
    }
    expect(refused).toBe(ALL.length * Object.keys(sample).length - EXPECTED.length)
    // The table has no row the expectations miss.
    const tableRows = TABLE.flatMap((r) => r.from.map((f) => `${f}/${r.trigger}`))
    expect(new Set(tableRows)).toEqual(allowed)
  })

  it("terminal states are final: only a reconciliation receipt follows outcome_unknown (rules 1-3)", () => {
    for (const from of TERMINAL_STATUSES) {
      for (const trigger of Object.values(sample)) {
        const result = transition(from, trigger)
        if (from === "outcome_unknown" && trigger._tag === "Reconcile") {
          expect(Either.getOrThrow(result).status).toBe("outcome_unknown")
        } else {
          expect(Either.isLeft(result), `${from}/${trigger._tag}`).toBe(true)
        }
      }
    }
  })

  it("status reasons: the budget, the failure reason, the interruption reason", () => {
    expect(Either.getOrThrow(transition("running", Trigger.Expire({ budget: "authorization_expired" }))).reason)
      .toBe("authorization_expired")
    expect(Either.getOrThrow(transition("queued", Trigger.Fail({ reason: "authorization_revoked" }))).reason)
      .toBe("authorization_revoked")
    expect(Either.getOrThrow(transition("running", Trigger.Interrupt({ reason: "admitted_content_missing" }))).reason)
      .toBe("admitted_content_missing")
    expect(Either.getOrThrow(transition("running", Trigger.Succeed())).reason).toBeNull()
  })
})
