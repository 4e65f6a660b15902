/**
 * Environment settings (D9, D16, D20): the environment's view (`/v1`) and the operator's (read and
 * set the limits a key cannot lower; `/operator/v1`, left out of the OpenAPI document as the rest of
 * the operator plane).
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { OperatorUpdateSettings, Settings, UpdateSettings } from "../Domain/EnvironmentSettings.js"
import { Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, tenantId } from "../Kernel/Params.js"
import { OperatorAuth, RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class EnvironmentSettingsApi extends HttpApiGroup.make("settings")
  .annotate(
    OpenApi.Description,
    "An environment's settings: the identity provider whose assertions actor sessions accept, the default model " +
      "profile of new agent revisions, how long audit entries are kept, and how often a schedule may fire at most."
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
          "before keep theirs). `audit_retention_days` (7 to 3650, default 90): entries older than that are swept; a key " +
          "may raise it, never lower it: a value below the current one is 403 `permission_error`, code " +
          "`retention_lowering_forbidden`, and nothing changes (the operator can lower it, down to 7). " +
          "`schedule_min_interval_seconds` is shown but set by the operator only: sent here it is 400 `unknown_parameter`."
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

export class OperatorSettingsApi extends HttpApiGroup.make("operator-settings")
  .add(
    HttpApiEndpoint.get("operatorGetSettings")`/operator/v1/tenants/${tenantId}/environments/${environment}/settings`
      .addSuccess(Settings)
      .annotate(OpenApi.Summary, "The environment's settings, as `GET P/settings` shows them")
  )
  .add(
    HttpApiEndpoint.patch("operatorUpdateSettings")`/operator/v1/tenants/${tenantId}/environments/${environment}/settings`
      .setPayload(OperatorUpdateSettings)
      .addSuccess(Settings)
      .annotate(
        OpenApi.Summary,
        "Set `audit_retention_days` (7..3650, lower or higher) and `schedule_min_interval_seconds` (1..3600); the fields " +
          "given change, others are refused (400 `unknown_parameter`). A new minimum applies to the cron expressions given " +
          "from then on; existing schedules keep theirs. Audited as an operator action"
      )
  )
  .middleware(OperatorAuth)
  .annotate(OpenApi.Exclude, true)
{}
