/**
 * The whole HTTP API as one HttpApi definition: handlers, the OpenAPI 3.1 document
 * (`GET /v1/openapi.json`) and typed clients all come from it.
 */
import { HttpApi, OpenApi } from "@effect/platform"

import { ActorSessionsApi } from "./ActorSessions/Api.js"
import { AgentsApi, ModelProfilesApi, RevisionsApi, WorkspacesApi } from "./Agents/Api.js"
import { ApprovalsApi } from "./Approvals/Api.js"
import { AuditApi } from "./Audit/Api.js"
import { OperatorAccountsApi } from "./Console/Api.js"
import { describeOperations } from "./Edge/OpenApiDoc.js"
import { EnvironmentSettingsApi, OperatorSettingsApi } from "./EnvironmentSettings/Api.js"
import { FilesApi } from "./Files/Api.js"
import {
  AuthenticationError,
  ConflictError,
  GoneError,
  InvalidRequestError,
  NotFoundError,
  PermissionError,
  RateLimitedError,
  UnavailableError
} from "./Kernel/Errors.js"
import { MemoryApi } from "./Memory/Api.js"
import { OperatorApi } from "./Operator/Api.js"
import { ApiKeysApi, EnvironmentsApi, ServiceActorsApi, TenantsApi, UsersApi } from "./Platform/Api.js"
import { OperatorProductionRequestsApi, ProductionRequestsApi } from "./ProductionRequests/Api.js"
import { OperatorQuotasApi, QuotasApi } from "./Quotas/Api.js"
import { ConversationsApi, EventsApi, RunsApi } from "./Runs/Api.js"
import { SchedulesApi } from "./Schedules/Api.js"
import { SystemApi } from "./System/Api.js"
import { ConnectionsApi, KeySetApi } from "./Tools/Api.js"
import { UsageApi } from "./Usage/Api.js"
import { WebhookDeliveriesApi, WebhookEndpointsApi } from "./Webhooks/Api.js"

const base = HttpApi.make("agent-platform")
  .add(TenantsApi)
  .add(EnvironmentsApi)
  .add(ApiKeysApi)
  .add(UsersApi)
  .add(ServiceActorsApi)
  .add(WorkspacesApi)
  .add(ModelProfilesApi)
  .add(AgentsApi)
  .add(RevisionsApi)
  .add(ConversationsApi)
  .add(RunsApi)
  .add(EventsApi)
  .add(UsageApi)
  .add(QuotasApi)
  .add(ConnectionsApi)
  .add(KeySetApi)
  .add(ApprovalsApi)
  .add(ActorSessionsApi)
  .add(EnvironmentSettingsApi)
  .add(AuditApi)
  .add(WebhookEndpointsApi)
  .add(WebhookDeliveriesApi)
  .add(SchedulesApi)
  .add(FilesApi)
  .add(MemoryApi)
  .add(ProductionRequestsApi)
  .add(SystemApi)
  .add(OperatorApi)
  .add(OperatorProductionRequestsApi)
  .add(OperatorQuotasApi)
  .add(OperatorSettingsApi)
  .add(OperatorAccountsApi)

export class Api extends base
  .addError(InvalidRequestError)
  .addError(AuthenticationError)
  .addError(PermissionError)
  .addError(NotFoundError)
  .addError(ConflictError)
  .addError(GoneError)
  .addError(RateLimitedError)
  .addError(UnavailableError)
  .annotateContext(OpenApi.annotations({
    title: "Agent Platform API",
    version: "0.1.0-draft.3",
    description: "Multi-tenant platform on which customers build products powered by software agents. " +
      "Contract revision 0.1.0-draft.3 (stage: proposed, visibility: public).",
    transform: (spec) => describeOperations(base, spec as any) as any
  }))
{}
