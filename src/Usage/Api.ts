/** Usage (D16): the usage records of an environment, and the usage report computed from them. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { Usage, UsageParams, UsageRecord, UsageRecordParams } from "../Domain/Usage.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List, Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const fromAfterTo = { code: "parameter_invalid", param: "from", when: "`from` is after `to`, either of them its default" }

export class UsageApi extends HttpApiGroup.make("usage")
  .annotate(
    OpenApi.Description,
    "What an environment used: immutable usage records (one per model call and per tool call, written in the " +
      "transaction of the run step that made the call) and the usage report computed from them."
  )
  .add(
    HttpApiEndpoint.get("getUsage")`/v1/tenants/${tenantId}/environments/${environment}/usage`
      .annotate(OpenApi.Summary, "Get usage")
      .setUrlParams(UsageParams)
      .addSuccess(Single(Usage))
      .annotate(
        OpenApi.Description,
        "Usage in [from, to) (default: the 24 h before now), in buckets by UTC day, agent_revision (default) or " +
          "model_profile (a tool call counts under its run's revision's profile); `totals` are the sums of the buckets. " +
          "`model_calls`, `tool_calls`, `input_tokens` and `output_tokens` are computed from the usage records " +
          "only: they equal the sums of what `GET .../records` lists for the same window, bucket by bucket. " +
          "`runs` and `run_seconds` are not call records: they come from the runs admitted in the window (by " +
          "their `created_at`), so a run that ended before any model call still counts, and from each run's " +
          "`started_at` and `completed_at`, which its state machine sets once. No counter kept beside the " +
          "records (that could drift from them) is read. `from` must not be after `to`."
      )
      .annotate(Refusals, [fromAfterTo])
      .annotate(RequiredScopes, ["usage:read"])
  )
  .add(
    HttpApiEndpoint.get("listUsageRecords")`/v1/tenants/${tenantId}/environments/${environment}/records`
      .annotate(OpenApi.Summary, "List usage records")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...UsageRecordParams.fields }))
      .addSuccess(List(UsageRecord))
      .annotate(
        OpenApi.Description,
        "The usage records created in [from, to) (default: the 24 h before now), newest first: one per model " +
          "call and per tool call (memory tools included), written in the transaction of the run step that made " +
          "the call, and never changed afterwards (there is no write route; the database refuses updates and " +
          "deletes, except the purge of a deleted environment). A model call that failed without an answer " +
          "carries no usage and has no record; neither has a tool call refused before it was sent (an unknown " +
          "tool, input not matching its schema). `run_id` lists one run's records (a run of another " +
          "environment lists none). A cursor is bound to the filters it was made with and keeps the window of " +
          "the first page (a default window does not move while paging)."
      )
      .annotate(Refusals, [fromAfterTo])
      .annotate(RequiredScopes, ["usage:read"])
  )
  .middleware(ServiceKey)
{}
