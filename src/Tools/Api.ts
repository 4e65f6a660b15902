/** Connections, tools, the public key set, approvals, actor sessions and settings (D9, D10, D12, D16). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { List, Single } from "../Kernel/Envelope.js"
import { EnvironmentName, PathId } from "../Kernel/Ids.js"
import {
  ActorSession,
  Approval,
  ApprovalDecision,
  ApprovalListParams,
  Connection,
  CreateActorSession,
  CreateConnection,
  EnvironmentSettings,
  Tool,
  ToolListParams,
  UpdateSettings
} from "../Domain/Tools.js"
import { IdempotencyHeaders } from "../Platform/Api.js"
import { ListParams } from "../Kernel/Cursor.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const tenantId = HttpApiSchema.param("tenant_id", PathId)
const environment = HttpApiSchema.param("environment", EnvironmentName)
const connectionId = HttpApiSchema.param("connection_id", PathId)
const toolId = HttpApiSchema.param("tool_id", PathId)
const approvalId = HttpApiSchema.param("approval_id", PathId)

export class ConnectionsApi extends HttpApiGroup.make("connections")
  .add(
    HttpApiEndpoint.post("createConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections`
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateConnection)
      .addSuccess(Single(Connection, 201))
      .annotate(OpenApi.Description, "Registers a customer HTTPS connection, `pending_review` until an operator reviews it. " +
        "The destination must be public HTTPS (400 `destination_refused`); operation schemas must be valid JSON Schema " +
        "2020-12 (400 `invalid_json_schema`); every write needs a `reconciliation_path`.")
      .annotate(RequiredScopes, ["connections:write"])
  )
  .add(
    HttpApiEndpoint.get("listConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections`
      .setUrlParams(ListParams)
      .addSuccess(List(Connection))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("getConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections/${connectionId}`
      .addSuccess(Single(Connection))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("listTool")`/v1/tenants/${tenantId}/environments/${environment}/tools`
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...ToolListParams.fields }))
      .addSuccess(List(Tool))
      .annotate(OpenApi.Description, "Tools of reviewed connections, one per operation, each with an immutable id; `connection_id` filters.")
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("getTool")`/v1/tenants/${tenantId}/environments/${environment}/tools/${toolId}`
      .addSuccess(Single(Tool))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .middleware(ServiceKey)
{}

/** JWKS: public (no key), so customer tool servers can verify invocation tokens. */
export const Jwks = Schema.Struct({ keys: Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Unknown })) })
  .annotations({ identifier: "JWKS" })

export class KeySetApi extends HttpApiGroup.make("jwks")
  .add(
    HttpApiEndpoint.get("getJwks")`/v1/tenants/${tenantId}/environments/${environment}/jwks.json`
      .addSuccess(Jwks)
      .annotate(OpenApi.Description, "The Ed25519 keys (JWK, `alg` EdDSA) tool invocation tokens of this cell are signed with. " +
        "No authentication. A rotated-out key stays listed until every token it signed has expired.")
  )
{}

export class ApprovalsApi extends HttpApiGroup.make("approvals")
  .add(
    HttpApiEndpoint.get("listApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals`
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...ApprovalListParams.fields }))
      .addSuccess(List(Approval))
      .annotate(RequiredScopes, ["approvals:read"])
  )
  .add(
    HttpApiEndpoint.get("getApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals/${approvalId}`
      .addSuccess(Single(Approval))
      .annotate(RequiredScopes, ["approvals:read"])
  )
  .add(
    HttpApiEndpoint.post("decideApproval")`/v1/tenants/${tenantId}/environments/${environment}/approvals/${approvalId}/decision`
      .setHeaders(Schema.Struct({
        ...IdempotencyHeaders.fields,
        "x-actor-token": Schema.optional(Schema.String).annotations({ description: "The deciding user's actor token (required)" })
      }))
      .setPayload(ApprovalDecision)
      .addSuccess(Single(Approval))
      .annotate(OpenApi.Description, "A user's decision: needs `X-Actor-Token` (403 `actor_required` without one). " +
        "409 `approval_not_pending` once decided or expired, `approval_expired` past its expiry.")
      .annotate(RequiredScopes, ["approvals:write"])
  )
  .middleware(ServiceKey)
{}

export class ActorSessionsApi extends HttpApiGroup.make("actor-sessions")
  .add(
    HttpApiEndpoint.post("createActorSession")`/v1/tenants/${tenantId}/environments/${environment}/actor-sessions`
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateActorSession)
      .addSuccess(Single(ActorSession, 201))
      .annotate(OpenApi.Description, "Exchanges an identity provider assertion for an actor token (at most 5 minutes). " +
        "The token is shown once; an idempotent replay returns it as null.")
      .annotate(RequiredScopes, ["actor-sessions:write"])
  )
  .middleware(ServiceKey)
{}

export class SettingsApi extends HttpApiGroup.make("settings")
  .add(
    HttpApiEndpoint.get("getSettings")`/v1/tenants/${tenantId}/environments/${environment}/settings`
      .addSuccess(Single(EnvironmentSettings))
      .annotate(RequiredScopes, ["settings:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateSettings")`/v1/tenants/${tenantId}/environments/${environment}/settings`
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateSettings)
      .addSuccess(Single(EnvironmentSettings))
      .annotate(RequiredScopes, ["settings:write"])
  )
  .middleware(ServiceKey)
{}
