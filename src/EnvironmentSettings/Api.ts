/** Environment settings (D9, D16): read and change them. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { Settings, UpdateSettings } from "../Domain/EnvironmentSettings.js"
import { Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class EnvironmentSettingsApi extends HttpApiGroup.make("settings")
  .annotate(
    OpenApi.Description,
    "An environment's settings: the identity provider whose assertions actor sessions accept, the default model " +
      "profile of new agent revisions, and how long audit entries are kept."
  )
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
      .annotate(
        OpenApi.Description,
        "Sets the fields given; the others keep their value. `identity_provider` (null removes it): its keys are " +
          "given inline (`jwks`, a usable JSON Web Key Set) or as a public HTTPS URL (`jwks_url`, the destination " +
          "rules of customer tools). `default_model_profile_id` (null removes it): a model profile of this " +
          "environment, which an agent revision created without `model_profile_id` then pins (revisions made " +
          "before keep theirs). `audit_retention_days` (1 to 3650, default 90): entries older than that are swept."
      )
      .annotate(Refusals, [
        {
          code: "destination_refused",
          param: "identity_provider.jwks_url",
          when:
            "`identity_provider.jwks_url` is not a public `https://` destination: a local, private, link-local or metadata host or address, a name that does not resolve only to public addresses, or plain `http://`, unless the operator's `DESTINATION_ALLOWLIST` admits it"
        },
        {
          code: "parameter_invalid",
          param: "identity_provider.jwks",
          when: "`identity_provider.jwks` is not a usable JSON Web Key Set: no keys, or a key that cannot be imported"
        },
        {
          code: "parameter_invalid",
          param: "default_model_profile_id",
          when: "`default_model_profile_id` names no model profile of this environment"
        }
      ])
      .annotate(RequiredScopes, ["settings:write"])
  )
  .middleware(ServiceKey)
{}
