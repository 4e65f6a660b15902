/**
 * The run state machine of contract part 3.1 (with D7/D8), as data: one table of transitions and a
 * pure `transition(status, trigger)`. The run actor and the HTTP handlers never set a status
 * themselves; they ask this module, inside the transaction that holds the run's row lock, and
 * commit what it answers (the new status and the event to append). Terminal states are final: no
 * row leaves them, except the `run.reconciled` receipt, which keeps `outcome_unknown`.
 */
import { Data, Either, Schema } from "effect"

export const RunStatus = Schema.Literal(
  "queued",
  "running",
  "requires_action",
  "cancel_requested",
  "succeeded",
  "failed",
  "cancelled",
  "expired",
  "interrupted",
  "outcome_unknown"
).annotations({ identifier: "RunStatus" })
export type RunStatus = typeof RunStatus.Type

export const TERMINAL_STATUSES = [
  "succeeded",
  "failed",
  "cancelled",
  "expired",
  "interrupted",
  "outcome_unknown"
] as const satisfies ReadonlyArray<RunStatus>
export const NON_TERMINAL_STATUSES = [
  "queued",
  "running",
  "requires_action",
  "cancel_requested"
] as const satisfies ReadonlyArray<RunStatus>

export const isTerminal = (s: RunStatus): boolean => (TERMINAL_STATUSES as ReadonlyArray<RunStatus>).includes(s)

/** The events of the transitions into a terminal status (TABLE below). */
export const TERMINAL_EVENT_TYPES = [
  "run.succeeded",
  "run.failed",
  "run.cancelled",
  "run.expired",
  "run.interrupted",
  "run.outcome_unknown"
] as const

export const EventType = Schema.Literal(
  "run.queued",
  "run.started",
  "run.message",
  "run.tool_call.started",
  "run.tool_call.completed",
  "run.tool_call.failed",
  "run.file.created",
  "run.file.failed",
  "run.requires_action",
  "run.approval.decided",
  "run.cancel_requested",
  ...TERMINAL_EVENT_TYPES,
  "run.reconciled"
).annotations({ identifier: "RunEventType" })
export type EventType = typeof EventType.Type

/** The budgets of contract part 8 whose expiry ends a run `expired`; the value is its status_reason. */
export type Budget = "start_deadline_exceeded" | "execution_deadline_exceeded" | "authorization_expired" | "approval_expired"

/** What happened to a run. */
export type Trigger = Data.TaggedEnum<{
  /** Execution starts (the actor picked the run up). */
  Start: {}
  /** The agent produced intermediate text (a step that also proposes tool calls, or progress). */
  Message: {}
  ToolCallStarted: {}
  ToolCallCompleted: {}
  ToolCallFailed: {}
  /** The agent produced a file (D13: a `run_output` file, written with this event). */
  FileCreated: {}
  /** A file the agent produced was not stored (D20: it did not fit the `storage_bytes` quota). */
  FileFailed: {}
  /** The agent's work completed with final content. */
  Succeed: {}
  /** The agent's work ended in error (model failure, authorization revoked, ...). */
  Fail: { readonly reason: string }
  /** The agent proposed a write: a human approval is awaited. */
  RequireAction: {}
  /** A human decided the pending approval. */
  DecideApproval: {}
  /** A cancel request. */
  Cancel: {}
  /** The runtime stopped the run's work after a cancel request. */
  CompleteCancel: {}
  /** Its environment (or tenant) was deleted: access ends at once (D19). */
  EnvironmentDeleted: {}
  /** A time budget ran out. */
  Expire: { readonly budget: Budget }
  /** The cell was restored and the run's admitted content is missing. */
  Interrupt: { readonly reason: string }
  /** An external write may have happened and could not be confirmed. */
  LoseOutcome: { readonly reason: string }
  /** A later reconciliation of an `outcome_unknown` run: a receipt, the status stays. */
  Reconcile: {}
}>
export const Trigger = Data.taggedEnum<Trigger>()

type TriggerTag = Trigger["_tag"]

/** A time the run records when a transition happens. */
export type Stamp = "started_at" | "completed_at"

/** A row of the table: from these states, this trigger leads to `to` (or stays) and emits `event`. */
export interface Row {
  readonly trigger: TriggerTag
  readonly from: ReadonlyArray<RunStatus>
  /** The new status; `"same"` keeps the current one. */
  readonly to: RunStatus | "same"
  readonly event: EventType
  /** Times this transition stamps (`completed_at` is stamped by every transition into a terminal status). */
  readonly stamps?: ReadonlyArray<Stamp>
}

const ACTIVE = ["queued", "running", "requires_action"] as const satisfies ReadonlyArray<RunStatus>

/** Every transition of contract 3.1, D7 and D8. Anything not listed is refused. */
export const TABLE: ReadonlyArray<Row> = [
  { trigger: "Start", from: ["queued"], to: "running", event: "run.started", stamps: ["started_at"] },
  { trigger: "Message", from: ["running"], to: "same", event: "run.message" },
  { trigger: "ToolCallStarted", from: ["running"], to: "same", event: "run.tool_call.started" },
  // A tool call already under way when cancel was requested still records how it ended.
  { trigger: "ToolCallCompleted", from: ["running", "cancel_requested"], to: "same", event: "run.tool_call.completed" },
  { trigger: "ToolCallFailed", from: ["running", "cancel_requested"], to: "same", event: "run.tool_call.failed" },
  { trigger: "FileCreated", from: ["running"], to: "same", event: "run.file.created" },
  { trigger: "FileFailed", from: ["running"], to: "same", event: "run.file.failed" },
  { trigger: "Succeed", from: ["running"], to: "succeeded", event: "run.succeeded" },
  // Revocation is checked before start and before each dispatch, so a queued or waiting run can fail.
  { trigger: "Fail", from: ACTIVE, to: "failed", event: "run.failed" },
  { trigger: "RequireAction", from: ["running"], to: "requires_action", event: "run.requires_action" },
  { trigger: "DecideApproval", from: ["requires_action"], to: "running", event: "run.approval.decided" },
  { trigger: "Cancel", from: ACTIVE, to: "cancel_requested", event: "run.cancel_requested" },
  { trigger: "CompleteCancel", from: ["cancel_requested"], to: "cancelled", event: "run.cancelled" },
  { trigger: "EnvironmentDeleted", from: [...ACTIVE, "cancel_requested"], to: "cancelled", event: "run.cancelled" },
  { trigger: "Expire", from: [...ACTIVE, "cancel_requested"], to: "expired", event: "run.expired" },
  { trigger: "Interrupt", from: [...ACTIVE, "cancel_requested"], to: "interrupted", event: "run.interrupted" },
  { trigger: "LoseOutcome", from: ["running", "cancel_requested"], to: "outcome_unknown", event: "run.outcome_unknown" },
  { trigger: "Reconcile", from: ["outcome_unknown"], to: "same", event: "run.reconciled" }
]

/** A trigger that does not apply in the current state. */
export class TransitionRefused extends Data.TaggedError("TransitionRefused")<{
  readonly status: RunStatus
  readonly trigger: TriggerTag
}> {}

export interface Transition {
  readonly status: RunStatus
  /** Whether the status changes (the event then reports the new status and reason). */
  readonly changed: boolean
  /** The `status_reason` to store with the new status (null for statuses without one). */
  readonly reason: string | null
  readonly event: EventType
  /** The times to stamp with the commit's time. */
  readonly stamps: ReadonlyArray<Stamp>
}

const reasonOf = (trigger: Trigger): string | null => {
  switch (trigger._tag) {
    case "Fail":
    case "Interrupt":
    case "LoseOutcome":
      return trigger.reason
    case "Expire":
      return trigger.budget
    case "Cancel":
    case "CompleteCancel":
      return "cancelled_by_request"
    case "EnvironmentDeleted":
      return "environment_deleted"
    default:
      return null
  }
}

/** Applies `trigger` to a run in `status`. */
export const transition = (status: RunStatus, trigger: Trigger): Either.Either<Transition, TransitionRefused> => {
  const row = TABLE.find((r) => r.trigger === trigger._tag && r.from.includes(status))
  if (!row) return Either.left(new TransitionRefused({ status, trigger: trigger._tag }))
  const stamps = row.stamps ?? []
  if (row.to === "same") return Either.right({ status, changed: false, reason: null, event: row.event, stamps })
  return Either.right({
    status: row.to,
    changed: row.to !== status,
    reason: reasonOf(trigger),
    event: row.event,
    stamps: isTerminal(row.to) ? [...stamps, "completed_at"] : stamps
  })
}

/** Whether a cancel request is accepted (202) in this state: D7 refuses terminal runs (409). */
export const isCancellable = (status: RunStatus): boolean => !isTerminal(status)
