/**
 * The request pipeline every response goes through (D3, D4, D5, contract 4 and 8):
 *   request id -> (for /v1) authenticate -> the cell's rate limit -> idempotency -> the HttpApi
 * and, on the way out, `X-Request-Id`, `Cache-Control: no-store`, RateLimit headers and any header
 * a handler set (Location). Failures that escape the HttpApi (unknown routes, unreadable bodies,
 * defects) become the same error envelope here. Audit and quotas (D16) slot in beside rate limit
 * and idempotency.
 */
import { randomBytes } from "node:crypto"

import { HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect, FiberRef, Option } from "effect"

import { ActorSessions } from "../ActorSessions.js"
import { Cells } from "../Cells/Cells.js"
import { AdmitRequest } from "../Cells/Protocol.js"
import { isDatabaseUnavailable } from "../Database/Defects.js"
import {
  type ApiError,
  Conflict,
  errorClassOf,
  InternalError,
  InvalidRequest,
  NotFound,
  RateLimited,
  toEnvelope,
  Unavailable
} from "../Kernel/Errors.js"
import { currentRequest, type RequestState } from "../Kernel/RequestContext.js"
import { Auth } from "../Platform/Auth.js"
import * as Idempotency from "./Idempotency.js"

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/
const MUTATIONS = new Set(["POST", "PATCH", "PUT", "DELETE"])
/** Headers a handler set that are part of the response a replay gives again (D5, D7). */
const REPLAYED_HEADERS = ["location", "preference-applied"] as const

/** `/v1` paths that need no key (D1). */
export const isPublicV1 = (path: string): boolean =>
  path === "/v1/openapi.json" || /^\/v1\/tenants\/[^/]+\/environments\/[^/]+\/jwks\.json$/.test(path)

export const errorResponse = (e: ApiError, requestId: string) => {
  const cls = errorClassOf(e)
  return HttpServerResponse.unsafeJson(toEnvelope(e, cls.type, requestId), { status: cls.status })
}

const isApiError = (e: unknown): e is ApiError =>
  e !== null && typeof e === "object" && "code" in e && typeof (e.constructor as any)?.status === "number"

const newRequestId = () => `req_${randomBytes(12).toString("base64url")}`

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

const bodyText = (response: HttpServerResponse.HttpServerResponse): string =>
  response.body._tag === "Uint8Array" ? new TextDecoder().decode(response.body.body) : ""

/** Errors that escaped the HttpApi, as envelopes. */
const escaped = (cause: Cause.Cause<unknown>, state: RequestState) => {
  // The HttpApi reads JSON bodies with `Effect.orDie(request.json)`: an unreadable body arrives
  // as a defect (RequestError), not as a failure.
  const failure = Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause))
  if (Option.isSome(failure)) {
    const e: any = failure.value
    if (e?._tag === "RouteNotFound") {
      return Effect.succeed(errorResponse(new NotFound({ code: "route_not_found", message: "Unrecognized request URL" }), state.requestId))
    }
    if (e?._tag === "RequestError") {
      return Effect.succeed(
        errorResponse(new InvalidRequest({ code: "invalid_body", message: "The request body could not be read as JSON" }), state.requestId)
      )
    }
    if (isDatabaseUnavailable(e)) {
      state.headers["retry-after"] = "2"
      return Effect.as(
        Effect.logWarning("database unavailable", cause),
        errorResponse(
          new Unavailable({ code: "database_unavailable", message: "The service cannot reach its database right now; retry shortly" }),
          state.requestId
        )
      )
    }
  }
  return Effect.as(
    Effect.logError("unhandled failure", cause),
    errorResponse(
      new InternalError({ code: "internal_error", message: "An internal error occurred; quote the request_id when reporting it" }),
      state.requestId
    )
  )
}

const finish = (response: HttpServerResponse.HttpServerResponse, state: RequestState) =>
  HttpServerResponse.setHeaders(response, {
    ...state.headers,
    "x-request-id": state.headers["x-request-id"] ?? state.requestId,
    "cache-control": "no-store"
  })

/** The /v1 gate: key, rate limit, idempotency. */
const guarded = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, state: RequestState) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const auth = yield* Auth
    const cells = yield* Cells
    const principal = yield* auth.authenticate(request.headers["authorization"])
    state.principal = principal

    const rate = yield* cells.send({ tenantId: principal.tenantId, environment: principal.environment }, new AdmitRequest())
    state.headers["ratelimit-policy"] = rate.policy
    state.headers["ratelimit"] = rate.state
    if (!rate.allowed) {
      state.headers["retry-after"] = String(rate.retryAfterSeconds)
      return yield* new RateLimited({
        code: "rate_limited",
        message: "Too many requests for this environment; retry after the time in Retry-After"
      })
    }

    if (!MUTATIONS.has(request.method)) return yield* app
    if (principal.deleting) {
      return yield* new Conflict({ code: "deletion_in_progress", message: "This tenant or environment is being deleted; it is read-only" })
    }

    const key = request.headers["idempotency-key"]
    if (key === undefined) {
      return yield* new InvalidRequest({
        code: "idempotency_key_required",
        message: "Mutations need an Idempotency-Key header",
        param: "Idempotency-Key"
      })
    }
    if (!Idempotency.validKey(key)) {
      return yield* new InvalidRequest({
        code: "idempotency_key_invalid",
        message: "Idempotency-Key must be 1 to 255 printable ASCII characters (0x21-0x7E)",
        param: "Idempotency-Key"
      })
    }
    const idem = yield* Idempotency.Idempotency
    const path = pathOf(request.url)
    // A request acting for a user is scoped by that user (a retry with a refreshed token replays;
    // another user's request with the same key does not see this one's result).
    const actorToken = request.headers["x-actor-token"]
    const user = actorToken === undefined ? undefined : yield* (yield* ActorSessions).requireActor(principal, actorToken)
    state.actingUser = user
    const scope: Idempotency.Scope = {
      tenantId: principal.tenantId,
      environment: principal.environment,
      actor: user === undefined ? `${principal.actor.type}:${principal.actor.id}` : `${user.type}:${user.id}`,
      method: request.method,
      path,
      key
    }
    const body = yield* Effect.orElseSucceed(request.text, () => "")
    const begun = yield* idem.begin(scope, Idempotency.fingerprint(request.method, path, body))
    state.idempotency = { ref: Idempotency.scopeRef(scope), takeover: begun._tag === "Proceed" && begun.takeover }
    if (begun._tag === "Replay") {
      const { headers, status, body: stored } = begun.response
      Object.assign(state.headers, headers, { "idempotent-replayed": "true" })
      return HttpServerResponse.text(stored, { status, contentType: "application/json" })
    }
    // Detached: a client that disconnects does not cancel the work it started (it may already
    // have committed); its outcome is stored all the same, for the retry to replay.
    return yield* idem.detached(
      scope,
      Effect.gen(function*() {
        const response = yield* app.pipe(
          Effect.catchAllCause((cause) => escaped(cause, state)),
          Effect.onInterrupt(() => idem.release(scope))
        )
        if (Idempotency.isStored(response.status)) {
          const text = bodyText(response)
          let stored = text
          try {
            stored = JSON.stringify(Idempotency.redactSecrets(JSON.parse(text)))
          } catch {
            // not JSON: store as is
          }
          const headers: Record<string, string> = { "x-request-id": state.requestId }
          for (const name of REPLAYED_HEADERS) if (state.headers[name]) headers[name] = state.headers[name]
          yield* idem.complete(scope, { status: response.status, headers, body: stored })
        } else {
          yield* idem.release(scope)
        }
        return response
      })
    )
  })

export const pipeline = HttpMiddleware.make((app) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const sent = request.headers["x-request-id"]
    const state: RequestState = {
      requestId: sent !== undefined && REQUEST_ID.test(sent) ? sent : newRequestId(),
      headers: {},
      principal: undefined
    }
    const path = pathOf(request.url)
    const handled = path.startsWith("/v1/") && !isPublicV1(path) ? guarded(app, state) : app
    type Needs = HttpServerRequest.HttpServerRequest | Auth | Cells | Idempotency.Idempotency | ActorSessions
    const response = yield* (handled as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, Needs>).pipe(
      Effect.catchIf(isApiError, (e) => Effect.succeed(errorResponse(e, state.requestId))),
      Effect.catchAllCause((cause) => escaped(cause, state)),
      Effect.locally(currentRequest, state)
    )
    return finish(response, state)
  })
)

/** The current request's state (for handlers that need the raw principal or request id). */
export const requestState = FiberRef.get(currentRequest)
