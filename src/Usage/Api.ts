/** Usage (D16). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { Usage, UsageParams } from "../Domain/Usage.js"
import { Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class UsageApi extends HttpApiGroup.make("usage")
  .annotate(OpenApi.Description, "What an environment used: runs, model calls, tokens, tool calls and run seconds over a time range.")
  .add(
    HttpApiEndpoint.get("getUsage")`/v1/tenants/${tenantId}/environments/${environment}/usage`
      .annotate(OpenApi.Summary, "Get usage")
      .setUrlParams(UsageParams)
      .addSuccess(Single(Usage))
      .annotate(
        OpenApi.Description,
        "Runs, model calls, tokens, tool calls and run seconds in [from, to), computed from " +
          "usage records; buckets by day, agent_revision (default) or model_profile. `from` must not be after `to`."
      )
      .annotate(Refusals, [
        { code: "parameter_invalid", param: "from", when: "`from` is after `to`, either of them its default" }
      ])
      .annotate(RequiredScopes, ["usage:read"])
  )
  .middleware(ServiceKey)
{}
