/** Handlers of schedules (D15). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell, requireScopes } from "../Kernel/Policy.js"
import { Quotas } from "../Quotas.js"
import { Schedules } from "../Schedules.js"

export const SchedulesLive = HttpGroup.group(
  Api,
  "schedules",
  (handlers) =>
    Effect.map(Effect.all([Schedules, Quotas]), ([schedules, quotas]) =>
      handlers
        .handle(
          "createSchedule",
          inCell((p, { payload }) => Effect.flatMap(quotas.limitsOf(p), (limits) => schedules.create(p, payload, limits.schedules)))
        )
        .handle("listSchedules", inCell((p, { urlParams }) => schedules.list(p, urlParams)))
        .handle("getSchedule", inCell((p, { path }) => schedules.get(p, path.schedule_id)))
        // enabling one makes it start runs again: it needs runs:write too (D20)
        .handle("updateSchedule", (request) =>
          Effect.zipRight(
            request.payload.enabled === true ? requireScopes(["runs:write"]) : Effect.void,
            inCell((p, { path, payload }: typeof request) => schedules.update(p, path.schedule_id, payload))(request)
          ))
        .handle("deleteSchedule", inCell((p, { path }) => schedules.remove(p, path.schedule_id)))
        .handle("listScheduleRuns", inCell((p, { path, urlParams }) => schedules.listRuns(p, path.schedule_id, urlParams))))
)
