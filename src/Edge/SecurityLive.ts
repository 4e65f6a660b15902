/**
 * The `ServiceKey` middleware: the pipeline has already authenticated the key (so revocation is
 * checked on every request); here the principal is provided to handlers (401 `missing_api_key`
 * without one). The operation's declared scopes are enforced around the handler by the compiled
 * endpoint (src/Edge/Endpoints.ts: 403 `missing_scope`).
 */
import { HttpRouter } from "@effect/platform"
import { Effect, Layer } from "effect"

import { AuthenticationFailed } from "../Kernel/Errors.js"
import { ServiceKey } from "../Kernel/Security.js"
import { requestState } from "./UnitOfWork.js"

export const ServiceKeyLive = Layer.succeed(
  ServiceKey,
  ServiceKey.of({
    ServiceKey: () =>
      Effect.flatMap(requestState, (state) =>
        state?.principal === undefined
          ? new AuthenticationFailed({ code: "missing_api_key", message: "A service key is required" })
          : Effect.succeed(state.principal))
  })
)

/**
 * The router that serves what is beside the HttpApi (`/docs`, `/v1/openapi.json`, `/metrics`) is
 * made case-sensitive, like the pipeline's `/v1/` gate, so a path the gate does not treat as `/v1`
 * (e.g. `/V1/openapi.json`) does not reach a `/v1` route, and lets long path parameters through.
 */
export const RouterConfigLive = HttpRouter.setRouterConfig({ maxParamLength: Number.MAX_SAFE_INTEGER, caseSensitive: true })
