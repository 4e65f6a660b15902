/** Handlers of conversations, runs, events and usage. */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, Stream } from "effect"
import { Api } from "../Api.js"
import { invalid } from "../Kernel/Errors.js"
import { ownCell } from "../Kernel/Policy.js"
import { Runs } from "../Runs.js"
import { TerminalRun } from "./Api.js"
import { eventStream } from "./Stream.js"
import { RunsRepo } from "./Repo.js"
import { EventBus } from "./EventBus.js"
import { Cells } from "../Runtime/CellsLive.js"
import { AppConfig } from "../Config/AppConfig.js"

export const ConversationsLive = HttpApiBuilder.group(Api, "conversations", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers
      .handle("createConversation", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.createConversation(p, payload)))
      .handle("getConversation", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.getConversation(p, path.conversation_id)))))

export const RunsLive = HttpApiBuilder.group(Api, "runs", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers
      .handle("createRun", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          const p = yield* ownCell(path.tenant_id, path.environment)
          const result = yield* runs.createRun(p, path.conversation_id, payload, headers.prefer, headers["x-actor-token"])
          return result.terminal ? TerminalRun.make({ run: result.run }) : result.run
        }))
      .handle("getRun", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.getRun(p, path.run_id)))
      .handle("cancelRun", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.cancelRun(p, path.run_id)))))

export const EventsLive = HttpApiBuilder.group(Api, "events", (handlers) =>
  Effect.gen(function*() {
    const runs = yield* Runs
    const streamContext = yield* Effect.context<RunsRepo | EventBus | Cells | AppConfig>()
    return handlers
      .handle("listRunEvents", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.listEvents(p, path.run_id, urlParams)))
      .handle("streamRunEvents", ({ headers, path, urlParams }) =>
        Effect.gen(function*() {
          const p = yield* ownCell(path.tenant_id, path.environment)
          if (headers.accept !== undefined && !/text\/event-stream|\*\/\*/i.test(headers.accept)) {
            return yield* invalid("accept_event_stream_required", "Send `Accept: text/event-stream` to stream events", "accept")
          }
          const after = yield* runs.openStream(p, path.run_id, headers["last-event-id"], urlParams.cursor)
          return HttpServerResponse.stream(eventStream(p, path.run_id, after).pipe(Stream.provideContext(streamContext)), {
            contentType: "text/event-stream",
            headers: { "x-accel-buffering": "no" }
          })
        }))
  }))

export const UsageLive = HttpApiBuilder.group(Api, "usage", (handlers) =>
  Effect.map(Runs, (runs) =>
    handlers.handle("getUsage", ({ path, urlParams }) =>
      Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => runs.getUsage(p, urlParams)))))
