/**
 * The request pipeline every response goes through (D3, D4, D5, D19, contract 4 and 8). For `/v1`:
 *
 *   request id -> URL hygiene -> the client address's limit if no valid key -> authenticate ->
 *   the cell's rate limit -> (mutations) Idempotency-Key, body hygiene, the actor's scope ->
 *   one transaction: the HttpApi (routing, scopes, validation, then the handler passes the
 *   idempotency gate: replay, 409, or execute) and the stored response -> commit ->
 *   what the handler asked for after the commit (cells told to start or cancel runs) ->
 *   a continuation (`Prefer: wait`) that may answer instead
 *
 * and, on the way out, `X-Request-Id`, `Cache-Control: no-store`, RateLimit headers and any header
 * a handler set (Location). A mutation whose answer is not stored (400, 401, 403, 429, 500, 503, or
 * anything decided before the gate) is rolled back whole: nothing half-done, safe to retry.
 * The audit log (D16, src/Edge/AuditTrail.ts): a kept mutation's entry is written in its
 * transaction, beside its stored response; a refused or rolled-back one's on its own afterwards; a
 * replay's not at all; a failed authentication's in the environment of the key it names, if any.
 * `/operator/v1` requests about an environment are audited too, a POST in one transaction with its
 * entry (rolled back unless 2xx). `/operator/v1` and `GET /metrics` spend from the client address's
 * limit when their operator token is wrong or missing, and are refused 429 once it is empty (D20).
 * Failures that escape the HttpApi (unknown routes, unreadable bodies, defects) become the same
 * error envelope here. Every log line of a request carries its `request_id`, and so does its span.
 */
import { type FileSystem, HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Cause, Data, Effect, Exit, Option, Schema, Scope } from "effect"

import { ActorSessions } from "../ActorSessions.js"
import type { Audit } from "../Audit.js"
import { Cells, CellUnavailable } from "../Cells/Cells.js"
import { admitRequest } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { isDatabaseUnavailable } from "../Database/Defects.js"
import * as Pipelined from "../Database/Pipelined.js"
import * as Rows from "../Database/Rows.js"
import {
  type ApiError,
  errorClassOf,
  InternalError,
  InvalidRequest,
  MethodNotAllowed,
  NotFound,
  RateLimited,
  toEnvelope,
  Unavailable
} from "../Kernel/Errors.js"
import { EnvironmentName } from "../Kernel/Ids.js"
import { cellKey, type Principal } from "../Kernel/Principal.js"
import { becomeCell, Shares } from "../Kernel/Shares.js"
import { annotateSpan } from "../Kernel/Spans.js"
import { recordRequest } from "../Observability/Metrics.js"
import { OperatorToken } from "../Operator.js"
import { Auth } from "../Platform.js"
import * as AuditTrail from "./AuditTrail.js"
import { ClientLimiter } from "./ClientLimiter.js"
import { detach } from "./Detached.js"
import type { Endpoint } from "./Endpoints.js"
import { checkedBody, checkUrl } from "./Hygiene.js"
import * as Idempotency from "./Idempotency.js"
import { bearerToken, methodLabel, unmatchedOperation } from "./Metrics.js"
import { requestIdOf } from "./RequestIds.js"
import { matchRoute, type Route, type RouteMatch } from "./Routes.js"
import { arrivals } from "./Server.js"
import { spanAttributes } from "./Tracing.js"
import { type RequestState, serve } from "./UnitOfWork.js"
import { preparedUpload } from "./Uploads.js"

const MUTATIONS = new Set(["POST", "PATCH", "PUT", "DELETE"])

/** The services the pipeline uses, resolved once when it is built (`pipeline`), not yielded per request. */
const services = Effect.all({
  sql: SqlClient.SqlClient,
  idem: Idempotency.Idempotency,
  clients: ClientLimiter,
  auth: Auth,
  cells: Cells,
  config: AppConfig,
  actors: ActorSessions,
  operatorToken: OperatorToken
})
type Services = Effect.Effect.Success<typeof services>

/** `/v1` paths that need no key (D1). */
export const isPublicV1 = (path: string): boolean =>
  path === "/v1/openapi.json" || /^\/v1\/tenants\/[^/]+\/environments\/[^/]+\/jwks\.json$/.test(path)

export const errorResponse = (e: ApiError, requestId: string) => {
  const cls = errorClassOf(e)
  return HttpServerResponse.unsafeJson(toEnvelope(e, cls.type, requestId), { status: cls.status })
}

const isApiError = (e: unknown): e is ApiError =>
  e !== null && typeof e === "object" && "code" in e && typeof (e.constructor as any)?.status === "number"

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

const isEnvironmentName = Schema.is(EnvironmentName)

const isSuccess = (response: HttpServerResponse.HttpServerResponse) => response.status >= 200 && response.status < 300

/** Errors that escaped the HttpApi, as envelopes. */
const escaped = (cause: Cause.Cause<unknown>, state: RequestState) => {
  // Interrupted and nothing else: the platform interrupts a handler whose client went away (the
  // pipeline around it runs on). Nobody reads this answer; it is no server error (metrics: 499).
  if (Cause.isInterruptedOnly(cause)) {
    return Effect.as(Effect.logDebug("request interrupted: the client went away"), HttpServerResponse.empty({ status: 499 }))
  }
  // Its idempotency claim, sent ahead, failed: the request is served again (`transactional`).
  if (state.gate?.claim === "failed") return Effect.succeed(HttpServerResponse.empty({ status: 500 }))
  // The HttpApi reads JSON bodies with `Effect.orDie(request.json)`: an unreadable body arrives
  // as a defect (RequestError), not as a failure.
  const failure = Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause))
  if (Option.isSome(failure)) {
    const e: any = failure.value
    if (isApiError(e)) return Effect.succeed(errorResponse(e, state.requestId))
    if (e?._tag === "RouteNotFound") {
      return Effect.succeed(errorResponse(new NotFound({ code: "route_not_found", message: "Unrecognized request URL" }), state.requestId))
    }
    if (e?._tag === "RequestError") {
      return Effect.succeed(
        errorResponse(new InvalidRequest({ code: "invalid_body", message: "The request body could not be read as JSON" }), state.requestId)
      )
    }
    if (e instanceof CellUnavailable) {
      state.headers["retry-after"] = "2"
      return Effect.as(
        Effect.logWarning(`cell ${e.cell} unavailable: ${e.reason}`),
        errorResponse(
          new Unavailable({
            code: "cell_unavailable",
            message: "This environment's cell is starting or moving to another node; retry after Retry-After seconds"
          }),
          state.requestId
        )
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

/** Any outcome of the app as a response. */
const answered = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>, state: RequestState) =>
  Effect.catchAllCause(app, (cause) => escaped(cause, state))

const finish = (response: HttpServerResponse.HttpServerResponse, state: RequestState) =>
  HttpServerResponse.setHeaders(response, {
    ...state.headers,
    "x-request-id": state.headers["x-request-id"] ?? state.requestId,
    "cache-control": "no-store"
  })

/** A mutation's answer that must not be kept: the transaction is rolled back and this is the answer. */
class RolledBack extends Data.TaggedError("RolledBack")<{ readonly response: HttpServerResponse.HttpServerResponse }> {}

/**
 * What rides the transaction's last statement, taken by the statement that sends it: the writes
 * (`UnitOfWork.withCommit`) and the reads (`UnitOfWork.readWithCommit`), which `carried` gives
 * their rows from that statement's answer.
 */
const takeLast = (state: RequestState) => {
  const writes = state.withCommit ?? []
  const reads = state.readsWithCommit ?? []
  state.withCommit = []
  state.readsWithCommit = []
  return {
    writes,
    reads: reads.map((r) => r.read),
    carried: (values: ReadonlyArray<unknown>) => reads.forEach((r, i) => (r.row = values[i]))
  }
}

/**
 * `work` (an answer, decided within) in one transaction, while `state.afterCommit` collects what
 * must wait for the commit, run once it committed, and `state.withCommit` the writes its last
 * statement sends (when `work` wrote no such statement, they are sent on their own before the
 * commit). Not kept: `work` refused its answer (RolledBack) or failed (the error's answer);
 * nothing of it was committed.
 */
const inTransaction = <R>(
  work: Effect.Effect<HttpServerResponse.HttpServerResponse, RolledBack, R>,
  state: RequestState,
  sql: SqlClient.SqlClient
) =>
  Effect.gen(function*() {
    const afterCommit: Array<Effect.Effect<void>> = []
    state.afterCommit = afterCommit
    state.withCommit = []
    state.readsWithCommit = []
    const written = Effect.tap(work, () => {
      const { carried, reads, writes } = takeLast(state)
      if (writes.length === 0 && reads.length === 0) return Effect.void
      return sql<Record<string, unknown>>`${Rows.withWrites(sql, writes)} SELECT ${
        reads.length === 0 ? sql`1` : Rows.readColumns(sql, reads)
      }`.pipe(Pipelined.commitsWith, Effect.map((rows) => carried(Rows.readValues(rows[0], reads.length))), Effect.orDie)
    })
    const committed = yield* sql.withTransaction(written).pipe(
      Effect.map((response) => ({ response, kept: true })),
      Effect.catchTag("RolledBack", ({ response }) => Effect.succeed({ response, kept: false })),
      Effect.catchAllCause((cause) => Effect.map(escaped(cause, state), (response) => ({ response, kept: false })))
    )
    state.afterCommit = undefined
    state.withCommit = undefined
    state.readsWithCommit = undefined
    if (committed.kept) {
      for (const after of afterCommit) {
        yield* after.pipe(Effect.catchAllCause((cause) => Effect.logError("work after a commit failed", cause)))
      }
    }
    return committed
  })

/**
 * A mutation in one transaction with its stored response and its audit entry (see the module
 * comment); afterwards the handler's after-commit work, then its continuation.
 */
const transactional = <E, R>(mutation: Mutation<E, R>) =>
  Effect.gen(function*() {
    const { principal, state, trail } = mutation
    const ahead = trail.route.gateAhead === true
    const headers = ahead ? { ...state.headers } : state.headers
    let { committed, gate } = yield* attempt(mutation, ahead)
    if (!committed.kept && Idempotency.unsettled(gate)) {
      // Its claim, sent ahead, did not hold (a replay, a 409) or was never sent: what was done is
      // rolled back and the request is served again, the gate first (its answer says which).
      yield* Effect.logDebug("idempotency claim sent ahead did not hold: serving the request again with the gate first")
      for (const name of Object.keys(state.headers)) delete state.headers[name]
      Object.assign(state.headers, headers)
      state.continuation = undefined
      ;({ committed, gate } = yield* attempt(mutation, false))
    }
    if (!committed.kept) {
      // refused or rolled back: its entry on its own, with the status answered (a replay writes none)
      if (gate.outcome !== "replayed") {
        yield* AuditTrail.writeAnswerAlone(trail, state, AuditTrail.keyHolder(principal, state), committed.response)
      }
      return committed.response
    }
    if (state.continuation === undefined || gate.outcome === "replayed") return committed.response
    // A retry replays the fuller answer too: it follows from the run (Runs.waitedReplay), not stored again.
    const instead = yield* state.continuation
    return Option.getOrElse(instead, () => committed.response)
  })

/** A mutation to serve: its app, request, idempotency scope and fingerprint, audit trail and key holder. */
interface Mutation<E, R> {
  readonly app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  readonly state: RequestState
  readonly scope: Idempotency.Scope
  readonly fingerprint: string
  readonly trail: AuditTrail.Trail
  readonly principal: Principal
  readonly services: Services
}

/** One attempt at a mutation's transaction, its gate's claim sent `ahead` or not: whether it was kept, and the gate. */
const attempt = <E, R>({ app, fingerprint, principal, scope, services, state, trail }: Mutation<E, R>, ahead: boolean) =>
  Effect.gen(function*() {
    const { idem } = services
    const gate = idem.gate(scope, fingerprint, state.headers, ahead)
    state.gate = gate

    const committed = yield* inTransaction(
      Effect.gen(function*() {
        const response = yield* answered(app, state)
        if (gate.outcome === "replayed") return response
        if (gate.outcome !== "passed") {
          // Decided before the gate (routing, scopes, validation, tenancy) or by it (409): nothing is kept.
          if (isSuccess(response)) {
            return yield* Effect.dieMessage(`a /v1 mutation answered ${response.status} without passing the idempotency gate`)
          }
          return yield* new RolledBack({ response })
        }
        if (!Idempotency.isStored(response.status)) return yield* new RolledBack({ response })
        const body = AuditTrail.parsedBody(response)
        // its stored response and its audit entry (D16), in one statement: durable with the
        // mutation, or none of them is
        const stored = yield* idem.storing(
          scope,
          fingerprint,
          Idempotency.storedForm(response.status, body, () => AuditTrail.bodyText(response), state.requestId, state.headers)
        )
        const { carried, reads, writes } = takeLast(state)
        const who = AuditTrail.keyHolder(principal, state)
        // the transaction's last statement: it carries the COMMIT (one round trip less)
        carried(yield* Pipelined.commitsWith(AuditTrail.write(trail, state, who, response.status, body, [stored, ...writes], reads)))
        return response
      }),
      state,
      services.sql
    )
    return { committed, gate }
  })

/** The address's limit is spent and the key is not known to it: no lookup at all. */
class ClientExhausted extends Data.TaggedError("ClientExhausted")<{
  readonly decision: { readonly retryAfterSeconds: number }
}> {}

/**
 * The key (an address whose limit is spent is refused unless it is known to it), then the cell's
 * admission: sets the principal and the RateLimit headers, and gives the cell's decision.
 */
const admit = (request: HttpServerRequest.HttpServerRequest, state: RequestState, address: string, s: Services) =>
  Effect.gen(function*() {
    const credential = request.headers["authorization"]
    const { clients } = s
    const exhausted = yield* clients.refused(address)
    if (exhausted !== undefined && !(yield* clients.known(credential))) return yield* new ClientExhausted({ decision: exhausted })
    const principal = yield* s.auth.authenticate(credential).pipe(
      // refused: it counts as no key, from now on too (D20), even if it worked a minute ago
      Effect.tapError(() => Effect.zipRight(clients.forget(credential), clients.spend(address)))
    )
    if (credential !== undefined) yield* clients.vouch(credential)
    state.principal = principal
    const rate = yield* s.cells.send({ tenantId: principal.tenantId, environment: principal.environment }, admitRequest)
    state.headers["ratelimit-policy"] = rate.policy
    state.headers["ratelimit"] = rate.state
    return { principal, rate }
  })

/**
 * A mutation's checks before its transaction (Idempotency-Key, body, actor token): its idempotency
 * scope and fingerprint.
 */
const prepared = (
  request: HttpServerRequest.HttpServerRequest,
  state: RequestState,
  principal: Principal,
  upload: Scope.Scope | undefined,
  s: Services
) =>
  Effect.gen(function*() {
    const { config } = s
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
    // An upload's body is a file (multipart, staged on disk within its own limit), not JSON: the
    // HttpApi then reads the request as parsed here.
    const { body, parsed } = upload === undefined
      ? { body: yield* checkedBody(request, config.edge.bodyLimitBytes), parsed: undefined }
      : yield* Effect.map(
        preparedUpload(request, upload, config.edge.requestTimeoutSeconds),
        (prepared) => ({ body: prepared.body, parsed: prepared.request })
      )
    // A request acting for a user is scoped by that user (a retry with a refreshed token replays;
    // another user's request with the same key does not see this one's result).
    const actorToken = request.headers["x-actor-token"]
    const user = actorToken === undefined ? undefined : yield* s.actors.requireActor(principal, actorToken)
    state.actingUser = user
    const path = pathOf(request.url)
    const scope: Idempotency.Scope = {
      tenantId: principal.tenantId,
      environment: principal.environment,
      actor: user === undefined ? `${principal.actor.type}:${principal.actor.id}` : `${user.type}:${user.id}`,
      method: request.method,
      path,
      key
    }
    return { scope, fingerprint: Idempotency.fingerprint(request.method, path, body), parsed }
  })

/** What answers a routed request: its endpoint (src/Edge/Endpoints.ts), or the routes beside the HttpApi. */
type Serve = (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>

/** The `/v1` gate: the client's limit, key, the cell's rate limit, then a mutation's transaction. */
const guarded = (
  request: HttpServerRequest.HttpServerRequest,
  app: Serve,
  state: RequestState,
  address: string,
  trail: AuditTrail.Trail,
  s: Services
) =>
  Effect.gen(function*() {
    const { principal, rate } = yield* admit(request, state, address, s).pipe(
      Effect.tapErrorTag("AuthenticationFailed", (e) =>
        AuditTrail.authenticationFailed(trail, state, request.headers["authorization"], e.code)),
      Effect.catchTag("ClientExhausted", ({ decision }) => {
        state.headers["retry-after"] = String(Math.max(1, decision.retryAfterSeconds))
        return new RateLimited({
          code: "rate_limited",
          message: "Too many requests without a valid key from this address; retry after the time in Retry-After"
        })
      })
    )
    if (!rate.allowed) {
      state.headers["retry-after"] = String(rate.retryAfterSeconds)
      return yield* new RateLimited({
        code: "rate_limited",
        message: "Too many requests for this environment; retry after the time in Retry-After"
      })
    }

    if (!MUTATIONS.has(request.method)) {
      return yield* app(request)
    }

    // An upload's staged file lives until its transaction is over (the handler copies it into the database).
    const staged = trail.route.multipart === true ? yield* Scope.make() : undefined
    const release = staged === undefined ? Effect.void : Scope.close(staged, Exit.void)
    const { fingerprint, parsed, scope } = yield* prepared(request, state, principal, staged, s).pipe(
      // refused before its transaction: its audit entry on its own
      Effect.tapError((e) =>
        Effect.zipRight(
          release,
          AuditTrail.writeAlone(trail, state, AuditTrail.keyHolder(principal, state), errorClassOf(e).status, undefined)
        )
      )
    )
    // Detached: a client that disconnects does not cancel the work it started; its outcome is
    // stored all the same, for the retry to replay.
    const served = app(parsed ?? request)
    return yield* s.idem.detached(
      Effect.ensuring(transactional({ app: served, state, scope, fingerprint, trail, principal, services: s }), release)
    )
  })

/** Requests of public `/v1` paths spend from their address's limit (D19: the public key set included). */
const publicV1 = <E, R>(
  app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
  state: RequestState,
  address: string,
  s: Services
) =>
  Effect.gen(function*() {
    const decision = yield* s.clients.spend(address)
    if (!decision.allowed) {
      state.headers["retry-after"] = String(Math.max(1, decision.retryAfterSeconds))
      return yield* new RateLimited({
        code: "rate_limited",
        message: "Too many requests without a valid key from this address; retry after the time in Retry-After"
      })
    }
    return yield* app
  })

/**
 * Routing before anything that depends on the key: 404 for a path no operation has, 405 for a wrong
 * method; the operation found.
 */
const routed = (match: RouteMatch, method: string, state: RequestState) =>
  Effect.suspend((): Effect.Effect<Extract<RouteMatch, { _tag: "Found" }>, NotFound | MethodNotAllowed> => {
    if (match._tag === "NoRoute") return new NotFound({ code: "route_not_found", message: "Unrecognized request URL" })
    if (match._tag === "WrongMethod") {
      state.headers["allow"] = match.allow.join(", ")
      return new MethodNotAllowed({
        code: "method_not_allowed",
        message: `${method} is not allowed on this path; it allows ${match.allow.join(", ")}`
      })
    }
    return Effect.succeed(match)
  })

/**
 * Operator authentication (`/operator/v1`, `GET /metrics`) is limited per client address like `/v1`
 * requests without a valid key (D20, D19's bucket): an address whose bucket is empty is refused 429
 * before its token is compared (unless that token authenticated lately); a wrong or missing token
 * spends one. The answer itself (401 or the operation's) is the app's.
 */
const operatorAuthLimited = (request: HttpServerRequest.HttpServerRequest, state: RequestState, address: string, s: Services) =>
  Effect.gen(function*() {
    const credential = request.headers["authorization"]
    const { clients } = s
    const exhausted = yield* clients.refused(address)
    if (exhausted !== undefined && !(yield* clients.known(credential))) {
      state.headers["retry-after"] = String(Math.max(1, exhausted.retryAfterSeconds))
      return yield* new RateLimited({
        code: "rate_limited",
        message: "Too many requests without a valid operator token from this address; retry after the time in Retry-After"
      })
    }
    const who = credential === undefined ? undefined : yield* s.operatorToken.whoIs(bearerToken(credential))
    if (who === undefined) return yield* clients.spend(address)
    yield* clients.vouch(credential!)
    // the operator plane's authentication and audit read it (a personal token: its account's id, issue 39)
    state.operator = who
  })

/** The environment an operator request is about: its path's, else the one its handler named. */
const operatorSubject = (trail: AuditTrail.Trail, state: RequestState): AuditTrail.Who | undefined => {
  const tenantId = trail.params["tenant_id"]
  const environment = trail.params["environment"]
  const cell = tenantId !== undefined && isEnvironmentName(environment) ? { tenantId, environment } : state.auditSubject
  const actor = state.operator === undefined ? AuditTrail.OPERATOR : { type: "operator" as const, id: state.operator }
  return cell === undefined ? undefined : { cell, actor, keyId: null }
}

/** An operator request's entry on its own; none without an environment, or for a refused token (logged). */
const operatorAnswered = (trail: AuditTrail.Trail, state: RequestState, response: HttpServerResponse.HttpServerResponse) => {
  const who = operatorSubject(trail, state)
  if (response.status === 401) {
    return Effect.logInfo("authentication failed").pipe(
      Effect.annotateLogs({ code: "invalid_operator_token", operation: trail.action, ip: trail.ip ?? "unknown" })
    )
  }
  return who === undefined ? Effect.void : AuditTrail.writeAnswerAlone(trail, state, who, response)
}

/**
 * `/operator/v1` (D1, D16): a request about an environment leaves an entry of the operator there. A
 * POST runs in one transaction with its entry, rolled back unless it answered 2xx (its entry then
 * written on its own), and what its handler asked for after the commit runs once it committed; a
 * read's entry is written after its answer.
 */
const operatorPlane = <E, R>(
  app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
  state: RequestState,
  trail: AuditTrail.Trail,
  sql: SqlClient.SqlClient
) =>
  Effect.gen(function*() {
    if (!MUTATIONS.has(trail.method)) {
      const response = yield* answered(app, state)
      yield* operatorAnswered(trail, state, response)
      return response
    }
    const committed = yield* inTransaction(
      Effect.gen(function*() {
        const response = yield* answered(app, state)
        if (!isSuccess(response)) return yield* new RolledBack({ response })
        const who = operatorSubject(trail, state)
        if (who !== undefined) yield* AuditTrail.write(trail, state, who, response.status, AuditTrail.parsedBody(response))
        return response
      }),
      state,
      sql
    )
    if (!committed.kept) yield* operatorAnswered(trail, state, committed.response)
    return committed.response
  })

/**
 * D4 on a routing error: a request with a valid key still gets its cell's RateLimit headers (and
 * spends from its limit, as any request does). Best effort, and never changes the answer.
 */
const rateStateOnRoutingError = (request: HttpServerRequest.HttpServerRequest, state: RequestState, address: string, s: Services) =>
  request.headers["authorization"] === undefined ? Effect.void : Effect.ignore(admit(request, state, address, s))

/**
 * The service's one request pipeline: `routes` (the HttpApi's and those beside it, `routesOf`)
 * matched once; a request for an endpoint is served by it (`endpoints`), any other by `beside`
 * (the OpenAPI document, `/docs`, `/metrics`; its own 404 otherwise). Its services are resolved
 * once, here: the app it gives yields none per request.
 */
export const pipeline = <R>(
  routes: ReadonlyArray<Route>,
  endpoints: ReadonlyMap<string, Endpoint>,
  beside: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, R>
) =>
  Effect.map(services, (s) =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const started = performance.now()
      const path = pathOf(request.url)
      const match = matchRoute(routes, request.method, path)
      const operation = match._tag === "Found" ? match.operation : unmatchedOperation(path)
      const tenant = match._tag === "Found" ? match.params["tenant_id"]?.slice(0, 128) : undefined
      return served(request, path, match, endpoints, beside, operation, tenant, s).pipe(
        // every answer counted and timed; an interrupted request (its client went away) as 499
        Effect.onExit((exit) =>
          recordRequest(
            operation,
            methodLabel(request.method),
            Exit.isSuccess(exit) ? exit.value.status : Cause.isInterruptedOnly(exit.cause) ? 499 : 500,
            (performance.now() - started) / 1000
          )
        ),
        // a streaming body is piped by Node after the request's fiber ended (Edge/Detached.ts)
        Effect.map((response) => detach(request, response))
      )
    }))

const served = <R>(
  request: HttpServerRequest.HttpServerRequest,
  path: string,
  match: RouteMatch,
  endpoints: ReadonlyMap<string, Endpoint>,
  beside: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, R>,
  operation: string,
  tenant: string | undefined,
  s: Services
) =>
  Effect.gen(function*() {
    const state: RequestState = {
      requestId: requestIdOf(request.headers["x-request-id"]),
      // its cell calls give up within the send timeout of its arrival at the server, whatever it
      // waited for since (its cell's turn): src/Kernel/RequestId.ts
      startedAt: arrivals.get(NodeHttpServerRequest.toIncomingMessage(request)) ?? Date.now(),
      headers: {},
      principal: undefined
    }
    // The request's span (when tracing) carries the id its log lines and answer carry, and names
    // its operation, route template and tenant (never a raw path's ids).
    yield* annotateSpan(spanAttributes(state.requestId, operation, tenant))
    const address = Option.getOrElse(request.remoteAddress, () => "unknown")
    const v1 = path.startsWith("/v1/")
    const endpoint = match._tag === "Found" ? endpoints.get(match.operation) : undefined
    const app: Serve = endpoint === undefined || match._tag !== "Found"
      ? () => beside as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>
      : (served) => endpoint.serve(served, match.params)
    const handled = v1
      ? checkUrl(request.url).pipe(
        Effect.zipRight(
          routed(match, request.method, state).pipe(Effect.tapError(() => rateStateOnRoutingError(request, state, address, s)))
        ),
        Effect.flatMap((match) =>
          isPublicV1(path)
            ? publicV1(app(request), state, address, s)
            : guarded(request, app, state, address, AuditTrail.trailOf(match, request.method, address), s)
        )
      )
      : path.startsWith("/operator/v1/") && match._tag === "Found"
      ? Effect.zipRight(
        operatorAuthLimited(request, state, address, s),
        operatorPlane(app(request), state, AuditTrail.trailOf(match, request.method, address), s.sql)
      )
      : path === "/metrics"
      ? Effect.zipRight(operatorAuthLimited(request, state, address, s), app(request))
      : app(request)
    type Needs = HttpServerRequest.HttpServerRequest | Audit | FileSystem.FileSystem
    // the request's fiber serves it (a tenant's request has `tenant_id` on its log lines too)
    yield* serve(state, tenant)
    const response = yield* answered(handled as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, Needs>, state)
    return finish(response, state)
  })

const CELL_PATH = /^\/v1\/tenants\/([^/?#]+)(?:\/environments\/([^/?#]+))?/

/**
 * The outermost middleware (issue 36): a request for a cell's path (`/v1/tenants/{t}/environments/{e}/...`)
 * runs, from its first step, as that cell's work: what it spends of the node's shares (the
 * database pool, the bytes of its files...) is the cell's, and its fibers run in the cell's lane
 * of the node's fair scheduler; the server's callback that read the request only starts it. A
 * tenant's path (`/v1/tenants/{t}`) is the tenant's; any other, the node's.
 */
export const cellLanes = HttpMiddleware.make((app) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const match = CELL_PATH.exec(request.url)
    if (match === null) return app
    const [, tenantId, environment] = match
    const key = environment === undefined ? tenantId! : cellKey({ tenantId: tenantId!, environment })
    // the request's fiber is the cell's work from here on (its fiber: nothing to restore)
    return Effect.flatMap(Shares, (shares) => Effect.zipRight(becomeCell(shares, key), Effect.zipRight(Effect.yieldNow(), app)))
  })
)
