/**
 * Quotas (D16): the environment's own view (`/v1`, scope `usage:read`) and the operators' (list and
 * set a limit; `/operator/v1`, left out of the OpenAPI document as the rest of the operator plane).
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { Quota, QuotaName, SetQuota } from "../Domain/Quotas.js"
import { List } from "../Kernel/Envelope.js"
import { environment, tenantId } from "../Kernel/Params.js"
import { OperatorAuth, RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const name = HttpApiSchema.param("name", QuotaName)

export const QUOTAS_DESCRIPTION =
  "Each quota is counted in the same transaction as what it counts, so it holds exactly under concurrency: " +
  "`runs_per_day` (runs admitted in the UTC day) and `concurrent_runs` (runs admitted and not finished) are counted " +
  "by the run admission itself; `tokens_per_day` (input and output tokens of the day's model calls) by the step " +
  "that made the call: once reached, no run is admitted until midnight UTC (a running run finishes its step); " +
  "`storage_bytes` (the bytes of the environment's files, run outputs included, and of its workspace memory values) " +
  "by the upload, the memory write or the run step that stores them, refused when they do not fit (D20: `used` never " +
  "exceeds `limit`; in a run, a file that does not fit is reported `run.file.failed` and a `memory_put` is a tool " +
  "error, both `quota_exceeded`); `webhook_endpoints` and `schedules` (D20: how many the environment has, 16 and 100 " +
  "by default) by their creation. Past a quota the request is 429 `quota_exceeded` with `Retry-After`: the seconds " +
  "until `resets_at` for a daily quota, 1 for `concurrent_runs`, 60 for the others (room comes only from " +
  "deleted files, memory keys, endpoints or schedules, or a raised limit). Limits are set by the operator; an environment starts with its kind's " +
  "defaults (sandbox small, production large)."

export class QuotasApi extends HttpApiGroup.make("quotas")
  .annotate(OpenApi.Description, `What an environment may use, and how much of it is used. ${QUOTAS_DESCRIPTION}`)
  .add(
    HttpApiEndpoint.get("listQuotas")`/v1/tenants/${tenantId}/environments/${environment}/quotas`
      .annotate(OpenApi.Summary, "List quotas")
      .addSuccess(List(Quota))
      .annotate(
        OpenApi.Description,
        "The environment's six quotas, always in the order `runs_per_day`, `concurrent_runs`, `tokens_per_day`, " +
          "`storage_bytes`, `webhook_endpoints`, `schedules`, each with its limit, what is used now, its window and when it resets (one page: " +
          "`next_cursor` is null)."
      )
      .annotate(RequiredScopes, ["usage:read"])
  )
  .middleware(ServiceKey)
{}

const OperatorQuotas = Schema.Struct({ items: Schema.Array(Quota), next_cursor: Schema.Null })

export class OperatorQuotasApi extends HttpApiGroup.make("operator-quotas")
  .add(
    HttpApiEndpoint.get("operatorListQuotas")`/operator/v1/tenants/${tenantId}/environments/${environment}/quotas`
      .addSuccess(OperatorQuotas)
      .annotate(OpenApi.Summary, "The environment's quotas: limit, used, window, resets_at")
  )
  .add(
    HttpApiEndpoint.put("setQuota")`/operator/v1/tenants/${tenantId}/environments/${environment}/quotas/${name}`
      .setPayload(SetQuota)
      .addSuccess(Quota)
      .annotate(
        OpenApi.Summary,
        "Set a quota's limit (0 admits nothing); applies to the next admission or upload. A limit below what is used " +
          "refuses more until usage falls below it; nothing admitted is undone"
      )
  )
  .middleware(OperatorAuth)
  .annotate(OpenApi.Exclude, true)
{}
