/** The audit log (D16): read it. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { AuditEntry, AuditListParams } from "../Domain/Audit.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class AuditApi extends HttpApiGroup.make("audit")
  .annotate(
    OpenApi.Description,
    "The environment's audit log: one append-only entry per mutation, per failed authentication with a key of the " +
      "environment, and per operator action about it. Entries hold who, what, on which resource and the status " +
      "answered; never a body or a secret."
  )
  .add(
    HttpApiEndpoint.get("listAuditEntries")`/v1/tenants/${tenantId}/environments/${environment}/audit`
      .annotate(OpenApi.Summary, "List audit entries")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...AuditListParams.fields }))
      .addSuccess(List(AuditEntry))
      .annotate(
        OpenApi.Description,
        "Newest first. `from` (inclusive) and `to` (exclusive) bound `occurred_at`; without them, every entry still " +
          "kept (`audit_retention_days` of the settings). `action`, `resource_id` and `actor_id` match exactly. A " +
          "cursor is bound to the filters it was made with. An idempotent replay adds no entry: the mutation " +
          "happened once."
      )
      .annotate(Refusals, [{ code: "parameter_invalid", param: "from", when: "`from` is after `to`" }])
      .annotate(RequiredScopes, ["audit:read"])
  )
  .middleware(ServiceKey)
{}
