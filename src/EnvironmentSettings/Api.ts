/** Environment settings (D9, D16): read and change them. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { Settings, UpdateSettings } from "../Domain/EnvironmentSettings.js"
import { Single } from "../Kernel/Envelope.js"
import { environment, IdempotencyHeaders, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class EnvironmentSettingsApi extends HttpApiGroup.make("settings")
  .annotate(OpenApi.Description, "An environment's settings: the identity provider whose assertions actor sessions accept.")
  .add(
    HttpApiEndpoint.get("getSettings")`/v1/tenants/${tenantId}/environments/${environment}/settings`
      .annotate(OpenApi.Summary, "Get environment settings")
      .addSuccess(Single(Settings))
      .annotate(RequiredScopes, ["settings:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateSettings")`/v1/tenants/${tenantId}/environments/${environment}/settings`
      .annotate(OpenApi.Summary, "Update environment settings")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateSettings)
      .addSuccess(Single(Settings))
      .annotate(RequiredScopes, ["settings:write"])
  )
  .middleware(ServiceKey)
{}
