/** The audit log (D16): who did what to which resource, with what answer. No bodies, no secrets. */
import { Schema } from "effect"

import { DateTimeParam, Timestamp } from "../Kernel/Ids.js"
import { RefString } from "../Kernel/Strings.js"

export const AuditActorType = Schema.Literal("api_key", "user", "operator", "member")
export type AuditActorType = typeof AuditActorType.Type

export const AuditEntry = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("audit_entry"),
  occurred_at: Timestamp,
  actor: Schema.Struct({ type: AuditActorType, id: Schema.String }).annotations({
    description:
      "The key, the user it acted for (`X-Actor-Token`), the platform's operator, or a `member` of the organization acting in the console"
  }),
  key_id: Schema.NullOr(Schema.String).annotations({ description: "The service key presented; null for an operator action" }),
  action: Schema.String.annotations({ description: "The operation, by its operationId (`createRun`)" }),
  resource: Schema.Struct({ type: Schema.String, id: Schema.String }).annotations({
    description: "What it acted on: the resource answered (`data.object`, `data.id`), else the last resource its path names " +
      "(for the environment itself, its name)"
  }),
  request_id: Schema.String,
  status: Schema.Int.annotations({ description: "The HTTP status answered" }),
  ip: Schema.NullOr(Schema.String).annotations({ description: "The client address the request came from" })
}).annotations({ identifier: "AuditEntry" })
export type AuditEntry = typeof AuditEntry.Type

export const AuditListParams = Schema.Struct({
  from: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; entries at or after it (default: no lower bound)" })),
  to: Schema.optional(DateTimeParam.annotations({ description: "RFC 3339; entries before it (default: no upper bound)" })),
  action: Schema.optional(RefString.annotations({ description: "Only this operation (an operationId, e.g. `createRun`)" })),
  resource_id: Schema.optional(RefString.annotations({ description: "Only entries about this resource" })),
  actor_id: Schema.optional(RefString.annotations({ description: "Only entries of this actor (a key id, a user id, `operator`)" }))
})
export type AuditListParams = typeof AuditListParams.Type
