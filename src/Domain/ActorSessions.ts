/** Actor sessions (D9): a user's short-lived token, made from an identity provider's assertion. */
import { Schema } from "effect"

import { RefString, SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"

export const CreateActorSession = strictBody(
  Schema.Struct({
    user_id: RefString,
    assertion: SingleLine.pipe(Schema.minLength(1), Schema.maxLength(16_384)).annotations({
      description: "A JWT signed by the environment's identity provider; `sub` is the user's external_id"
    })
  }).annotations({ identifier: "CreateActorSession" })
)

export const ActorSession = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("actor_session"),
  user_id: Schema.String,
  token: Schema.NullOr(Schema.String).annotations({ description: "Shown once; send it as X-Actor-Token" }),
  expires_at: Timestamp
}).annotations({ identifier: "ActorSession" })
