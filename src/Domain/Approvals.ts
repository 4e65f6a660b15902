/** Human approvals of writes (D9, contract 3.1 rules 4-6). */
import { Schema } from "effect"
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
  run_id: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128)))
})

export const ApprovalDecision = Schema.Struct({
  decision: Schema.Literal("approve", "deny"),
  reason: Schema.optional(Schema.String.pipe(Schema.maxLength(2000)))
}).annotations({ identifier: "ApprovalDecision" })
