/** Human approvals of writes (D9, contract 3.1 rules 4-6). */
import { Schema } from "effect"

import { RefString } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"

export const ApprovalStatus = Schema.Literal("pending", "approved", "denied", "expired")

const ActorRef = Schema.Struct({ type: Schema.Literal("user"), id: Schema.String })

export const Approval = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("approval"),
  run_id: Schema.String,
  tool_call_id: Schema.String,
  status: ApprovalStatus,
  operation: Schema.Struct({
    tool_id: Schema.String,
    connection_id: Schema.String,
    name: Schema.String,
    effect: Schema.Literal("write")
  }),
  input: Schema.Unknown.annotations({ description: "The exact input the write will be called with" }),
  destination_url: Schema.String,
  agent_revision_id: Schema.String,
  reason: Schema.NullOr(Schema.String),
  decided_by: Schema.NullOr(ActorRef),
  created_at: Timestamp,
  expires_at: Timestamp,
  decided_at: Schema.NullOr(Timestamp)
}).annotations({ identifier: "Approval" })
export type Approval = typeof Approval.Type

export const ApprovalListParams = Schema.Struct({
  status: Schema.optional(ApprovalStatus),
  run_id: Schema.optional(RefString)
})

export const ApprovalDecision = strictBody(
  Schema.Struct({
    decision: Schema.Literal("approve", "deny"),
    reason: Schema.optional(Schema.String.pipe(Schema.maxLength(2000)))
  }).annotations({ identifier: "ApprovalDecision" })
)

// ---- the life of an approval, as data -------------------------------------------------------

export type ApprovalStatus = typeof ApprovalStatus.Type

/** What can happen to an approval: a person decides it, or its time runs out (with its run's). */
export type ApprovalEvent =
  | { readonly _tag: "Decide"; readonly decision: "approve" | "deny" }
  | { readonly _tag: "Expire" }

/** Every transition of an approval; anything else is refused (a decided or expired approval stays so). */
export const APPROVAL_TRANSITIONS: ReadonlyArray<{
  readonly from: ApprovalStatus
  readonly event: ApprovalEvent["_tag"]
  readonly decision?: "approve" | "deny"
  readonly to: ApprovalStatus
}> = [
  { from: "pending", event: "Decide", decision: "approve", to: "approved" },
  { from: "pending", event: "Decide", decision: "deny", to: "denied" },
  { from: "pending", event: "Expire", to: "expired" }
]

const matches = (event: ApprovalEvent) => (t: (typeof APPROVAL_TRANSITIONS)[number]) =>
  t.event === event._tag && (event._tag !== "Decide" || t.decision === event.decision)

/** The status an event leads to, and the statuses it may leave from. */
export const approvalTransition = (event: ApprovalEvent) => {
  const rows = APPROVAL_TRANSITIONS.filter(matches(event))
  return { to: rows[0]!.to, from: rows.map((r) => r.from) }
}
