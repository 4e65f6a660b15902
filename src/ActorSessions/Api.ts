/** Actor sessions (D9): an identity provider's assertion exchanged for a user's actor token. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { ActorSession, CreateActorSession } from "../Domain/ActorSessions.js"
import { Single } from "../Kernel/Envelope.js"
import { environment, IdempotencyHeaders, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

export class ActorSessionsApi extends HttpApiGroup.make("actor-sessions")
  .annotate(OpenApi.Description, "Actor tokens (at most 5 minutes) for a user, exchanged for the identity provider's assertion.")
  .add(
    HttpApiEndpoint.post("createActorSession")`/v1/tenants/${tenantId}/environments/${environment}/actor-sessions`
      .annotate(OpenApi.Summary, "Create an actor session")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateActorSession)
      .addSuccess(Single(ActorSession, 201))
      .annotate(
        OpenApi.Description,
        "Exchanges an identity provider assertion for an actor token (at most 5 minutes). " +
          "The token is shown once; an idempotent replay returns it as null."
      )
      .annotate(RequiredScopes, ["actor-sessions:write"])
  )
  .middleware(ServiceKey)
{}
