/**
 * Schedules (D15): a cron expression in an IANA time zone that starts a run of a pinned agent
 * revision in a new conversation, as the key that created it; and the runs it started.
 */
import { Schema } from "effect"

import { strictBody } from "../Kernel/Body.js"
import { Timestamp } from "../Kernel/Ids.js"
import { RefString, SingleLine } from "../Kernel/Strings.js"
import { CreateRun, Run } from "./Runs.js"

/**
 * `active`: fires at `next_run_at`; `paused`: `enabled` is false; `disabled`: the platform stopped
 * it for good (`status_reason`, e.g. `authorization_revoked`).
 */
export const ScheduleStatus = Schema.Literal("active", "paused", "disabled").annotations({
  description: "`active` fires at `next_run_at`; `paused` (`enabled: false`) does not; `disabled` never fires again " +
    "(`status_reason` says why: `authorization_revoked` when the key that created it was revoked or its environment deleted)"
})
export type ScheduleStatus = typeof ScheduleStatus.Type

/** Why a schedule was disabled: the key it acts as may no longer act. */
export const AUTHORIZATION_REVOKED = "authorization_revoked"

const Cron = SingleLine.pipe(Schema.minLength(1), Schema.maxLength(200)).annotations({
  description: "Five fields (`minute hour day-of-month month day-of-week`), six with seconds first, or a nickname " +
    "(`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`), as `croner` reads them " +
    "(ranges, steps, lists, names, `L`, `W`, `#`). A schedule that would never fire is refused (400 `invalid_cron`)"
})

const Timezone = SingleLine.pipe(Schema.minLength(1), Schema.maxLength(64)).annotations({
  description: "An IANA time zone name (`Europe/Berlin`), in which the cron's wall-clock times are read; default `UTC`. " +
    "Unknown names and UTC offsets are refused (400 `invalid_timezone`)"
})

/** A run's input, exactly as run creation takes it (and checks it: `input_too_large`). */
const Input = CreateRun.fields.input.annotations({ description: "The input of each run it starts, as in run creation" })

export const CreateSchedule = strictBody(
  Schema.Struct({
    workspace_id: RefString,
    agent_revision_id: RefString.annotations({ description: "A revision of an agent in this workspace: each run uses it" }),
    cron: Cron,
    timezone: Schema.optional(Timezone),
    input: Input,
    enabled: Schema.optional(Schema.Boolean.annotations({ description: "Default true; false creates it `paused`" }))
  }).annotations({ identifier: "CreateSchedule" })
)
export type CreateSchedule = typeof CreateSchedule.Type

export const UpdateSchedule = strictBody(
  Schema.Struct({
    cron: Schema.optional(Cron),
    timezone: Schema.optional(Timezone),
    input: Schema.optional(Input),
    enabled: Schema.optional(Schema.Boolean.annotations({ description: "false pauses it; true resumes it from now" }))
  }).annotations({
    identifier: "UpdateSchedule",
    description: "At least one field",
    jsonSchema: { minProperties: 1 }
  })
)
export type UpdateSchedule = typeof UpdateSchedule.Type

export const Schedule = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("schedule"),
  workspace_id: Schema.String,
  agent_revision_id: Schema.String,
  cron: Schema.String,
  timezone: Schema.String,
  input: Input,
  enabled: Schema.Boolean,
  status: ScheduleStatus,
  status_reason: Schema.NullOr(Schema.String),
  next_run_at: Schema.NullOr(Timestamp).annotations({
    description: "The next scheduled time, the first after now; null unless `active` (or when the cron has no later time)"
  }),
  last_run_at: Schema.NullOr(Timestamp).annotations({ description: "The scheduled time of the latest run it started" }),
  last_run_id: Schema.NullOr(Schema.String).annotations({ description: "The latest run it started" }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Schedule" })
export type Schedule = typeof Schedule.Type

export const DeletedSchedule = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("schedule"),
  deleted: Schema.Literal(true)
}).annotations({ identifier: "DeletedSchedule" })

/** A run a schedule started: the run as `GET .../runs/{run_id}` shows it, and the time it was scheduled for. */
export const ScheduledRun = Schema.Struct({
  ...Run.fields,
  scheduled_at: Timestamp.annotations({
    description: "The scheduled time this run was started for (the latest one missed, after downtime)"
  })
}).annotations({ identifier: "ScheduledRun" })
export type ScheduledRun = typeof ScheduledRun.Type
