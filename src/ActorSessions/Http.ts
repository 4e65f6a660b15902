/** Handlers of actor sessions (D9). */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

import { ActorSessions } from "../ActorSessions.js"
import { Api } from "../Api.js"
import { inCell } from "../Kernel/Policy.js"

export const ActorSessionsLive = HttpApiBuilder.group(
  Api,
  "actor-sessions",
  (handlers) =>
    Effect.map(
      ActorSessions,
      (sessions) => handlers.handle("createActorSession", inCell((p, { payload }) => sessions.createSession(p, payload)))
    )
)
