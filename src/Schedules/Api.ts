/** Schedules (D15): cron expressions that start runs, and the runs they started. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { CreateSchedule, DeletedSchedule, Schedule, ScheduledRun, UpdateSchedule } from "../Domain/Schedules.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List, Single } from "../Kernel/Envelope.js"
import { type Refusal, Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const scheduleId = idParam("schedule_id")

const SCHEDULE_RULES: ReadonlyArray<Refusal> = [
  {
    code: "invalid_cron",
    param: "cron",
    when: "`cron` is not 5 fields, 6 with seconds first, or a nickname (`@hourly`...) that `croner` reads, or never fires"
  },
  {
    code: "parameter_invalid",
    param: "cron",
    when: "`cron` fires more often than the environment's `schedule_min_interval_seconds` (default 60, set by the operator: " +
      "see `GET .../settings`): two of its times of day, read from its second, minute and hour fields, are closer than " +
      "that, across midnight included; checked whenever `cron` is given"
  },
  { code: "invalid_timezone", param: "timezone", when: "`timezone` is not an IANA time zone name this service knows" },
  {
    code: "input_too_large",
    param: "input.N.text",
    when: "a text item of `input` holds more than 100,000 characters",
    inSchema: true
  },
  { code: "too_many_files", param: "input.N", when: "`input` names more than 10 files (as in run creation)" }
]

const FIRING = "Each scheduled time starts one run, in a new conversation, as the key that created the schedule, exactly " +
  "once across restarts and processes. Times the service was down for are not caught up one by one: only the latest " +
  "missed one runs, then the schedule goes on from the first time after now. Daylight saving time: a wall-clock time " +
  "skipped by a spring-forward runs at the same offset after the gap (02:30 runs at 03:30 local time that day); one that " +
  "occurs twice at a fall-back runs once, at its first occurrence. If that key is revoked (or its environment deleted), " +
  "the schedule becomes `disabled` (`status_reason: authorization_revoked`) at its next due time, fires no more, and a " +
  "`schedule.disabled` webhook event is sent. Due schedules of several environments fire in turn, one of each " +
  "environment at a time, so one environment's many due schedules do not hold up another's."

const BOUNDS = "A schedule starts runs, so creating one needs `runs:write` besides `schedules:write` (403 `missing_scope`). " +
  "The environment has at most its `schedules` quota of them (100 by default, `GET .../quotas`): one more is 429 " +
  "`quota_exceeded` with `Retry-After`, and nothing is stored; deleting one gives its place back."

export class SchedulesApi extends HttpApiGroup.make("schedules")
  .annotate(OpenApi.Description, `Cron schedules that start runs of an agent revision. ${FIRING}`)
  .add(
    HttpApiEndpoint.post("createSchedule")`/v1/tenants/${tenantId}/environments/${environment}/schedules`
      .annotate(OpenApi.Summary, "Create a schedule")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateSchedule)
      .addSuccess(Single(Schedule, 201))
      .annotate(
        OpenApi.Description,
        "A cron expression in an IANA time zone (default `UTC`) that starts a run of the agent revision with `input`. " +
          "The workspace and revision, and the files `input` names, must be of this environment (404 otherwise, as a " +
          "missing id); a file deleted later makes its scheduled times start no run. `next_run_at` is the " +
          `first scheduled time after now; \`enabled: false\` creates it \`paused\`. ${BOUNDS} ${FIRING}`
      )
      .annotate(Refusals, [
        {
          code: "revision_not_in_workspace",
          param: "agent_revision_id",
          when: "the agent revision belongs to an agent of another workspace than `workspace_id`"
        },
        ...SCHEDULE_RULES
      ])
      .annotate(RequiredScopes, ["schedules:write", "runs:write"])
  )
  .add(
    HttpApiEndpoint.get("listSchedules")`/v1/tenants/${tenantId}/environments/${environment}/schedules`
      .annotate(OpenApi.Summary, "List schedules")
      .setUrlParams(ListParams)
      .addSuccess(List(Schedule))
      .annotate(OpenApi.Description, "Newest first.")
      .annotate(RequiredScopes, ["schedules:read"])
  )
  .add(
    HttpApiEndpoint.get("getSchedule")`/v1/tenants/${tenantId}/environments/${environment}/schedules/${scheduleId}`
      .annotate(OpenApi.Summary, "Get a schedule")
      .addSuccess(Single(Schedule))
      .annotate(RequiredScopes, ["schedules:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateSchedule")`/v1/tenants/${tenantId}/environments/${environment}/schedules/${scheduleId}`
      .annotate(OpenApi.Summary, "Update a schedule")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateSchedule)
      .addSuccess(Single(Schedule))
      .annotate(
        OpenApi.Description,
        "Changes `cron`, `timezone`, `input` or `enabled`. A new cron or time zone, or `enabled: true` on a paused schedule, " +
          "computes `next_run_at` from now: the times it was paused for are not caught up. `enabled: false` pauses it " +
          "(`status: paused`, `next_run_at: null`). `enabled: true` needs `runs:write` besides `schedules:write` (403 " +
          "`missing_scope`, whatever the schedule's state): the schedule starts runs again. A new `cron` must respect the " +
          "environment's `schedule_min_interval_seconds` (400 `parameter_invalid`); a schedule whose cron an earlier, " +
          "lower minimum admitted keeps it. A `disabled` schedule cannot be changed or enabled again: 409 " +
          "`schedule_disabled` (delete it and create a new one with a valid key)."
      )
      .annotate(Refusals, SCHEDULE_RULES)
      .annotate(RequiredScopes, ["schedules:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteSchedule")`/v1/tenants/${tenantId}/environments/${environment}/schedules/${scheduleId}`
      .annotate(OpenApi.Summary, "Delete a schedule")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(DeletedSchedule))
      .annotate(
        OpenApi.Description,
        "It fires no more, and its place in the `schedules` quota is free again. The runs it started stay (they are runs " +
          "of their conversations)."
      )
      .annotate(RequiredScopes, ["schedules:write"])
  )
  .add(
    HttpApiEndpoint.get(
      "listScheduleRuns"
    )`/v1/tenants/${tenantId}/environments/${environment}/schedules/${scheduleId}/runs`
      .annotate(OpenApi.Summary, "List the runs a schedule started")
      .setUrlParams(ListParams)
      .addSuccess(List(ScheduledRun))
      .annotate(
        OpenApi.Description,
        "Newest first. Each item is the run as `GET .../runs/{run_id}` shows it now, with `scheduled_at`: the scheduled " +
          "time it was started for. Runs hold what agents said, so this needs `runs:read` beside `schedules:read`."
      )
      .annotate(RequiredScopes, ["schedules:read", "runs:read"])
  )
  .middleware(ServiceKey)
{}
