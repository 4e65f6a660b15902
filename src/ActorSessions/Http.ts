/** Handlers of actor sessions (D9). */
import { Effect } from "effect"

import { ActorSessions } from "../ActorSessions.js"
import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"

export const ActorSessionsLive = HttpGroup.group(
  Api,
  "actor-sessions",
  (handlers) =>
    Effect.map(
      ActorSessions,
      (sessions) => handlers.handle("createActorSession", inCell((p, { payload }) => sessions.createSession(p, payload)))
    )
)
