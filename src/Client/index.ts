/**
 * `agent-platform/client`: a typed client of the /v1 API, made from the same `HttpApi` as the
 * server and its OpenAPI document.
 *
 *   const client = yield* AgentPlatformClient.make({ baseUrl, apiKey, tenantId })
 *   const user = yield* client.users.createUser({ payload: { external_id: "u1", display_name: "Ada" } })
 *
 * with `Effect.provide(FetchHttpClient.layer)` (from `@effect/platform`).
 */
export {
  AuthenticationFailed,
  Conflict,
  Gone,
  InvalidRequest,
  NotFound,
  PermissionDenied,
  RateLimited,
  Unavailable
} from "../Kernel/Errors.js"
export { AgentPlatform, type AgentPlatformClient, layer, make } from "./Client.js"
export { type StreamRunEvents, type StreamRunEventsOptions } from "./Events.js"
export { type ClientOptions } from "./Options.js"
export { type ApiError } from "./Types.js"
