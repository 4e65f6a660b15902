/** Handlers of conversations, runs and events (contract part 4 rows; D7, D8). */
import { HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Runs } from "../Runs.js"

export const ConversationsLive = HttpGroup.group(Api, "conversations", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers
      .handle("createConversation", inCell((p, { payload }) => runs.createConversation(p, payload)))
      .handle("getConversation", inCell((p, { path }) => runs.getConversation(p, path.conversation_id)))))

export const RunsLive = HttpGroup.group(Api, "runs", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers
      .handle(
        "createRun",
        inCell(
          (p, { headers, path, payload }) => runs.createRun(p, path.conversation_id, payload, headers.prefer, headers["x-actor-token"]),
          // a replay of a `Prefer: wait` request answers what the wait did (D5, D7)
          runs.waitedReplay
        )
      )
      .handle("getRun", inCell((p, { path }) => runs.getRun(p, path.run_id)))
      .handle("cancelRun", inCell((p, { path }) => runs.cancelRun(p, path.run_id)))))

export const EventsLive = HttpGroup.group(Api, "events", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers
      .handle("listRunEvents", inCell((p, { path, urlParams }) => runs.listEvents(p, path.run_id, urlParams)))
      .handle(
        "streamRunEvents",
        inCell((p, { headers, path, urlParams }) =>
          Effect.map(
            runs.streamEvents(p, path.run_id, {
              accept: headers.accept,
              lastEventId: headers["last-event-id"],
              cursor: urlParams.cursor
            }),
            (body) => HttpServerResponse.raw(body, { contentType: "text/event-stream", headers: { "x-accel-buffering": "no" } })
          )
        )
      )))
