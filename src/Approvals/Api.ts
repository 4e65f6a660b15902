/** Human approvals of writes (D9): list, read, decide. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { Approval, ApprovalDecision, ApprovalListParams } from "../Domain/Approvals.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List, Single } from "../Kernel/Envelope.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const approvalId = idParam("approval_id")

export class ApprovalsApi extends HttpApiGroup.make("approvals")
  .annotate(OpenApi.Description, "Human approvals of tool writes: list, read and decide them.")
  .add(
    HttpApiEndpoint.get("listApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals`
      .annotate(OpenApi.Summary, "List approvals")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...ApprovalListParams.fields }))
      .addSuccess(List(Approval))
      .annotate(RequiredScopes, ["approvals:read"])
  )
  .add(
    HttpApiEndpoint.get("getApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals/${approvalId}`
      .annotate(OpenApi.Summary, "Get an approval")
      .addSuccess(Single(Approval))
      .annotate(RequiredScopes, ["approvals:read"])
  )
  .add(
    HttpApiEndpoint.post("decideApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals/${approvalId}/decision`
      .annotate(OpenApi.Summary, "Decide an approval")
      .setHeaders(Schema.Struct({
        ...IdempotencyHeaders.fields,
        "x-actor-token": Schema.optional(Schema.String).annotations({ description: "The deciding user's actor token (required)" })
      }))
      .setPayload(ApprovalDecision)
      .addSuccess(Single(Approval))
      .annotate(
        OpenApi.Description,
        "A user's decision: needs `X-Actor-Token` (403 `actor_required` without one). " +
          "409 `approval_not_pending` once decided or expired, `approval_expired` past its expiry."
      )
      .annotate(RequiredScopes, ["approvals:write"])
  )
  .middleware(ServiceKey)
{}
