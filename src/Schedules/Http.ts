/** Handlers of schedules (D15). */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { inCell } from "../Kernel/Policy.js"
import { Schedules } from "../Schedules.js"

export const SchedulesLive = HttpApiBuilder.group(Api, "schedules", (handlers) =>
  Effect.map(Schedules, (schedules) =>
    handlers
      .handle("createSchedule", inCell((p, { payload }) => schedules.create(p, payload)))
      .handle("listSchedules", inCell((p, { urlParams }) => schedules.list(p, urlParams)))
      .handle("getSchedule", inCell((p, { path }) => schedules.get(p, path.schedule_id)))
      .handle("updateSchedule", inCell((p, { path, payload }) => schedules.update(p, path.schedule_id, payload)))
      .handle("deleteSchedule", inCell((p, { path }) => schedules.remove(p, path.schedule_id)))
      .handle("listScheduleRuns", inCell((p, { path, urlParams }) => schedules.listRuns(p, path.schedule_id, urlParams)))))
