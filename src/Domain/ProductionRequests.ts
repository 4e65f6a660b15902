/**
 * The production request (D17): a tenant asks, from its sandbox, for a `production` environment;
 * an operator approves (the environment is provisioned, with no keys) or rejects it (with a
 * reason). One open (`submitted`) request per tenant at a time.
 */
import { Schema } from "effect"

import { strictBody } from "../Kernel/Body.js"
import { Timestamp } from "../Kernel/Ids.js"
import { Email } from "./Platform.js"

export const ProductionRequestStatus = Schema.Literal("submitted", "approved", "rejected").annotations({
  description: "submitted: waiting for an operator; approved: the `production` environment was provisioned; rejected: see " +
    "`decision_reason` (a new request may be submitted)"
})
export type ProductionRequestStatus = typeof ProductionRequestStatus.Type

export const CreateProductionRequest = strictBody(
  Schema.Struct({
    use_case: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4000)).annotations({
      description: "What the tenant will run in production (free text, up to 4000 characters)"
    }),
    expected_monthly_runs: Schema.Int.pipe(Schema.between(1, 1_000_000_000)).annotations({
      description: "Runs a month the tenant expects in production (1 to 1,000,000,000)"
    }),
    contact_email: Email.annotations({ description: "Whom the operator contacts about the request" })
  }).annotations({ identifier: "CreateProductionRequest" })
)
export type CreateProductionRequest = typeof CreateProductionRequest.Type

export const ProductionRequest = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("production_request"),
  status: ProductionRequestStatus,
  use_case: Schema.String,
  expected_monthly_runs: Schema.Int,
  contact_email: Schema.String,
  created_at: Timestamp,
  decided_at: Schema.NullOr(Timestamp).annotations({ description: "When an operator approved or rejected it; null while submitted" }),
  decision_reason: Schema.NullOr(Schema.String).annotations({ description: "The operator's reason, if one was given" })
}).annotations({ identifier: "ProductionRequest" })
export type ProductionRequest = typeof ProductionRequest.Type

/** The operator's view: the request with the tenant it is of. */
export const OperatorProductionRequest = Schema.Struct({
  ...ProductionRequest.fields,
  tenant_id: Schema.String
}).annotations({ identifier: "OperatorProductionRequest" })
export type OperatorProductionRequest = typeof OperatorProductionRequest.Type

/** An operator's decision: an optional reason, recorded on the request (and shown to the tenant). */
export const DecideProductionRequest = strictBody(
  Schema.Struct({
    reason: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2000)))
  }).annotations({ identifier: "DecideProductionRequest" })
)
export type DecideProductionRequest = typeof DecideProductionRequest.Type

export const OperatorProductionRequestListParams = Schema.Struct({
  status: Schema.optional(ProductionRequestStatus)
})
