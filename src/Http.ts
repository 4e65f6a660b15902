/**
 * The HTTP application: the one HttpApi with its handlers, the OpenAPI document and its reference
 * page, wrapped in the request pipeline. `AppLive` adds the services; `main.ts` adds the server.
 */
import { HttpApi, HttpApiBuilder, HttpApiScalar, HttpRouter, HttpServer } from "@effect/platform"
import { Effect, Layer } from "effect"

import { ActorSessions } from "./ActorSessions.js"
import { ActorSessionsLive } from "./ActorSessions/Http.js"
import { Agents } from "./Agents.js"
import { AgentsLive, ModelProfilesLive, RevisionsLive, WorkspacesLive } from "./Agents/Http.js"
import { Api } from "./Api.js"
import { Approvals } from "./Approvals.js"
import { ApprovalsLive } from "./Approvals/Http.js"
import { ApprovalsRepo } from "./Approvals/Repo.js"
import { Audit } from "./Audit.js"
import { AuditLive } from "./Audit/Http.js"
import { Console, OperatorCredentialsLive } from "./Console.js"
import { ConsoleRouteLive } from "./Console/Http.js"
import { OperatorAccountsLive, OperatorConsoleRouteLive } from "./Console/OperatorHttp.js"
import { Secrets } from "./Crypto/Secrets.js"
import { ClientLimiter } from "./Edge/ClientLimiter.js"
import { compileEndpoints } from "./Edge/Endpoints.js"
import { Idempotency } from "./Edge/Idempotency.js"
import { MetricsRouteLive } from "./Edge/Metrics.js"
import { OpenApiDocLive } from "./Edge/OpenApiDoc.js"
import { cellLanes, pipeline } from "./Edge/Pipeline.js"
import { ROUTES } from "./Edge/Routes.js"
import { RouterConfigLive, ServiceKeyLive } from "./Edge/SecurityLive.js"
import { withRequestTracing } from "./Edge/Tracing.js"
import { UnitOfWorkLive } from "./Edge/UnitOfWork.js"
import { EnvironmentSettings } from "./EnvironmentSettings.js"
import { EnvironmentSettingsLive, OperatorSettingsLive } from "./EnvironmentSettings/Http.js"
import { Files } from "./Files.js"
import { FilesLive } from "./Files/Http.js"
import { HandlerRegistry } from "./Kernel/HttpGroup.js"
import { Memory } from "./Memory.js"
import { MemoryLive } from "./Memory/Http.js"
import { EventLoopLive } from "./Observability/EventLoop.js"
import { Operator } from "./Operator.js"
import { OperatorAuthLive, OperatorLive } from "./Operator/Http.js"
import { OperatorRepo } from "./Operator/Repo.js"
import { OperatorToken } from "./Operator/Token.js"
import { WeightsRefreshLive } from "./Operator/Weights.js"
import { KeyCache, Platform } from "./Platform.js"
import { Auth } from "./Platform/Auth.js"
import { Deletions } from "./Platform/Deletions.js"
import { ApiKeysLive, EnvironmentsLive, ServiceActorsLive, TenantsLive, UsersLive } from "./Platform/Http.js"
import { ProductionRequests } from "./ProductionRequests.js"
import { OperatorProductionRequestsLive, ProductionRequestsLive } from "./ProductionRequests/Http.js"
import { Quotas } from "./Quotas.js"
import { OperatorQuotasLive, QuotasLive } from "./Quotas/Http.js"
import { Runs } from "./Runs.js"
import { EventBus } from "./Runs/EventBus.js"
import { ConversationsLive, EventsLive, RunsLive } from "./Runs/Http.js"
import { RunStoreSql } from "./Runs/Repo.js"
import { CellsLive } from "./Runtime/CellsLive.js"
import { ClusterLive } from "./Runtime/Cluster.js"
import { ReconcilerLive } from "./Runtime/Reconciler.js"
import { RecoveryLive } from "./Runtime/Recovery.js"
import { SchedulerLive } from "./Runtime/Scheduler.js"
import { Schedules } from "./Schedules.js"
import { SchedulesLive } from "./Schedules/Http.js"
import { SystemLive } from "./System/Http.js"
import { Tools } from "./Tools.js"
import { ConnectionsLive, KeySetLive } from "./Tools/Http.js"
import { Invoker } from "./Tools/Invoker.js"
import { OperationsRepo } from "./Tools/OperationsRepo.js"
import { SigningKeys } from "./Tools/Signing.js"
import { UsageReports } from "./Usage.js"
import { UsageLive } from "./Usage/Http.js"
import { Webhooks } from "./Webhooks.js"
import { WebhookDeliveriesLive, WebhookEndpointsLive } from "./Webhooks/Http.js"
import { WebhookWorkerLive } from "./Webhooks/Worker.js"

const GroupsLive = Layer.mergeAll(
  TenantsLive,
  EnvironmentsLive,
  ApiKeysLive,
  UsersLive,
  ServiceActorsLive,
  WorkspacesLive,
  ModelProfilesLive,
  AgentsLive,
  RevisionsLive,
  ConversationsLive,
  RunsLive,
  EventsLive,
  UsageLive,
  QuotasLive,
  ConnectionsLive,
  KeySetLive,
  ApprovalsLive,
  ActorSessionsLive,
  EnvironmentSettingsLive,
  AuditLive,
  WebhookEndpointsLive,
  WebhookDeliveriesLive,
  SchedulesLive,
  FilesLive,
  MemoryLive,
  ProductionRequestsLive,
  SystemLive,
  OperatorLive,
  OperatorProductionRequestsLive,
  OperatorQuotasLive,
  OperatorSettingsLive,
  OperatorAccountsLive
)

/** The HttpApi with every group's handlers (recorded in the `HandlerRegistry` for the pipeline). */
export const ApiLive = HttpApiBuilder.api(Api).pipe(
  Layer.provide(GroupsLive),
  Layer.provide([ServiceKeyLive, OperatorAuthLive]),
  Layer.provideMerge(HandlerRegistry.Live)
)

// the consoles (issues 38, 39) act through the same Operator, Audit, Secrets, Tools, ProductionRequests, Quotas, SigningKeys and Webhooks (layers are shared by reference)
const ConsoleLive = Console.Default.pipe(
  Layer.provide([
    Operator.Default,
    Audit.Default,
    Secrets.Default,
    Tools.Default,
    ProductionRequests.Default,
    Quotas.Default,
    SigningKeys.Default,
    Webhooks.Default
  ])
)

/** Services behind the handlers and the pipeline (they need AppConfig and a SqlClient). */
export const ServicesLive = Layer.mergeAll(
  EventLoopLive,
  Platform.Default,
  Agents.Default,
  Secrets.Default,
  Operator.Default,
  Auth.Default,
  Idempotency.Default,
  ClientLimiter.Default,
  Runs.Default,
  UsageReports.Default,
  EventBus.Default,
  Deletions.Default,
  OperatorToken.Default,
  Tools.Default,
  ActorSessions.Default,
  Approvals.Default,
  SigningKeys.Default,
  OperationsRepo.Default,
  ApprovalsRepo.Default,
  EnvironmentSettings.Default,
  Audit.Default,
  Invoker.Default,
  Webhooks.Default,
  Schedules.Default,
  Files.Default,
  Memory.Default,
  ProductionRequests.Default,
  Quotas.Default,
  ConsoleLive,
  // operators' personal tokens, for the operator plane's authentication (issue 39)
  OperatorCredentialsLive.pipe(Layer.provide(ConsoleLive))
).pipe(
  Layer.provideMerge(CellsLive),
  Layer.provideMerge(ClusterLive),
  Layer.provideMerge(RunStoreSql),
  // what a request may do to its answer and transaction (src/Kernel/UnitOfWork.ts), for every service
  Layer.provideMerge(UnitOfWorkLive),
  // the keys this process authenticated lately: one for the authentication and the changes that forget them
  Layer.provideMerge(KeyCache.Default)
)

/**
 * `/docs` (Scalar): bearer authentication with a service key preselected, so "Test request" sends
 * `Authorization: Bearer` once a key is pasted. Scalar reads `authentication` from the same
 * configuration; @effect/platform's type lists only its display options, and passes the rest on.
 * The page loads nothing from elsewhere: Scalar is bundled, and its default fonts (from
 * fonts.scalar.com) are off. `npm run check:docs` drives the page in headless Chromium.
 */
const DOCS_CONFIG = {
  withDefaultFonts: false,
  authentication: { preferredSecurityScheme: "ServiceKey" }
} as unknown as HttpApiScalar.ScalarConfig

/**
 * Serves the API through the one pipeline (needs an HttpServer, AppConfig and a SqlClient): the
 * HttpApi's endpoints compiled once (src/Edge/Endpoints.ts), the routes beside it (the OpenAPI
 * document, /docs, /metrics) on the platform's router. The server writes the response after the
 * pipeline has added its headers and stored idempotent results. The server's span around each
 * request (named per operation, see Edge/Tracing.ts) wraps it all.
 */
const ServeLive = Effect.gen(function*() {
  const { api, context } = yield* HttpApi.Api
  const endpoints = compileEndpoints(api, (yield* HandlerRegistry).all(), context)
  const beside = yield* HttpRouter.toHttpApp(yield* HttpApiBuilder.Router.router)
  return HttpServer.serve(cellLanes(yield* pipeline(ROUTES, endpoints, beside)))
}).pipe(
  Layer.unwrapEffect,
  withRequestTracing,
  Layer.provide(HttpApiBuilder.Router.Live)
)

export const HttpLive = ServeLive.pipe(
  Layer.provide(RecoveryLive),
  Layer.provide(ReconcilerLive),
  Layer.provide(WebhookWorkerLive),
  Layer.provide(SchedulerLive),
  Layer.provide(WeightsRefreshLive.pipe(Layer.provide(OperatorRepo.Default))),
  Layer.provide(HttpApiScalar.layer({ path: "/docs", scalar: DOCS_CONFIG })),
  Layer.provide(MetricsRouteLive),
  Layer.provide(ConsoleRouteLive), // /console: the customer console (issue 38)
  Layer.provide(OperatorConsoleRouteLive), // /operator/console: the operator console (issue 39)
  Layer.provide(OpenApiDocLive),
  Layer.provide(RouterConfigLive),
  Layer.provide(ApiLive),
  Layer.provideMerge(ServicesLive)
)
