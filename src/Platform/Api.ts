/** The platform plane of /v1 (contract part 4): tenants, environments, keys, users, service actors, deletion jobs. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import {
  ApiKey,
  CreatedApiKey,
  CreateServiceActor,
  CreateUser,
  DeletionJob,
  Environment,
  RotateApiKey,
  ServiceActor,
  Tenant,
  UpdateActor,
  UpdateTenant,
  User
} from "../Domain/Platform.js"
import { ListParams } from "../Kernel/Cursor.js"
import { Accepted, List, Single } from "../Kernel/Envelope.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const keyId = idParam("key_id")
const userId = idParam("user_id")
const serviceActorId = idParam("service_actor_id")
const jobId = idParam("deletion_job_id")

const ROTATION = [
  "Makes a new key with the same name, kind and scopes (and service actor) as this one, `rotated_from` this key; its",
  "`secret` is shown once (an idempotent replay shows null). This key keeps working for `grace_seconds` (0 to 86,400;",
  "3,600 by default; 0: it expires at once): its `expires_at` is set to the end of the grace, and the keys derived from it",
  "expire with it. After that it is listed `expired` and every request with it is 401 `key_expired`; the runs it created",
  "end `failed` (`status_reason: authorization_revoked`) before their next step and its schedules are disabled at their",
  "next due time, as for a revoked key. Actor tokens stay bound to the key that made their session. Only an active key",
  "that was not rotated yet can be rotated: a revoked or expired key is 409 `key_not_active`; a key already rotated (in",
  "its grace) is 409 `key_already_rotated` (revoke it to end its grace at once). The key must be within the caller's",
  "management ceiling (403 `outside_management_ceiling`), as for revoking. Rotating the calling key itself is allowed:",
  "choose a grace long enough to switch. The body is a JSON object, `{}` for the default grace."
].join(" ")

export class TenantsApi extends HttpApiGroup.make("tenants")
  .annotate(OpenApi.Description, "The tenant a service key belongs to: read, update and delete it.")
  .add(
    HttpApiEndpoint.get("listTenants", "/v1/tenants")
      .annotate(OpenApi.Summary, "List tenants")
      .setUrlParams(ListParams)
      .addSuccess(List(Tenant))
      .annotate(RequiredScopes, ["tenants:read"])
  )
  .add(
    HttpApiEndpoint.get("getTenant")`/v1/tenants/${tenantId}`
      .annotate(OpenApi.Summary, "Get a tenant")
      .addSuccess(Single(Tenant))
      .annotate(RequiredScopes, ["tenants:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateTenant")`/v1/tenants/${tenantId}`
      .annotate(OpenApi.Summary, "Update a tenant")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateTenant)
      .addSuccess(Single(Tenant))
      .annotate(RequiredScopes, ["tenants:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteTenant")`/v1/tenants/${tenantId}`
      .annotate(OpenApi.Summary, "Delete a tenant")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["tenants:write"])
  )
  .middleware(ServiceKey)
{}

export class EnvironmentsApi extends HttpApiGroup.make("environments")
  .annotate(
    OpenApi.Description,
    "A tenant's environments (`sandbox`, `production`), each with its own keys, actors, agents and runs; deletions answer with a deletion job to poll."
  )
  .add(
    HttpApiEndpoint.get("listEnvironments")`/v1/tenants/${tenantId}/environments`
      .annotate(OpenApi.Summary, "List environments")
      .setUrlParams(ListParams)
      .addSuccess(List(Environment))
      .annotate(RequiredScopes, ["environments:read"])
  )
  .add(
    HttpApiEndpoint.get("getEnvironment")`/v1/tenants/${tenantId}/environments/${environment}`
      .annotate(OpenApi.Summary, "Get an environment")
      .addSuccess(Single(Environment))
      .annotate(RequiredScopes, ["environments:read"])
  )
  .add(
    HttpApiEndpoint.del("deleteEnvironment")`/v1/tenants/${tenantId}/environments/${environment}`
      .annotate(OpenApi.Summary, "Delete an environment")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["environments:write"])
  )
  .add(
    HttpApiEndpoint.get("getDeletionJob")`/v1/tenants/${tenantId}/environments/${environment}/deletion-jobs/${jobId}`
      .annotate(OpenApi.Summary, "Get a deletion job")
      .addSuccess(Single(DeletionJob))
      .annotate(
        OpenApi.Description,
        "Any key of the environment may poll the deletion jobs its `Location` headers point at: the key that deleted a user (users:write) needs no other scope to follow the job."
      )
      .annotate(RequiredScopes, [])
  )
  .middleware(ServiceKey)
{}

export class ApiKeysApi extends HttpApiGroup.make("api-keys")
  .annotate(
    OpenApi.Description,
    "The service keys of an environment: read them, rotate them and revoke them. A key's secret is shown once, when it is made."
  )
  .add(
    HttpApiEndpoint.get("listApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys`
      .annotate(OpenApi.Summary, "List API keys")
      .setUrlParams(ListParams)
      .addSuccess(List(ApiKey))
      .annotate(RequiredScopes, ["keys:read"])
  )
  .add(
    HttpApiEndpoint.get("getApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys/${keyId}`
      .annotate(OpenApi.Summary, "Get an API key")
      .addSuccess(Single(ApiKey))
      .annotate(RequiredScopes, ["keys:read"])
  )
  .add(
    HttpApiEndpoint.post("rotateApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys/${keyId}/rotate`
      .annotate(OpenApi.Summary, "Rotate an API key")
      .setHeaders(IdempotencyHeaders)
      .setPayload(RotateApiKey)
      .addSuccess(Single(CreatedApiKey, 201))
      .annotate(OpenApi.Description, ROTATION)
      .annotate(RequiredScopes, ["keys:revoke"])
  )
  .add(
    HttpApiEndpoint.post("revokeApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys/${keyId}/revoke`
      .annotate(OpenApi.Summary, "Revoke an API key")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(ApiKey))
      .annotate(RequiredScopes, ["keys:revoke"])
  )
  .middleware(ServiceKey)
{}

export class UsersApi extends HttpApiGroup.make("users")
  .annotate(OpenApi.Description, "The customer's end users in an environment: the people runs can act for and who decide approvals.")
  .add(
    HttpApiEndpoint.get("listUser")`/v1/tenants/${tenantId}/environments/${environment}/users`
      .annotate(OpenApi.Summary, "List users")
      .setUrlParams(ListParams)
      .addSuccess(List(User))
      .annotate(RequiredScopes, ["users:read"])
  )
  .add(
    HttpApiEndpoint.post("createUser")`/v1/tenants/${tenantId}/environments/${environment}/users`
      .annotate(OpenApi.Summary, "Create a user")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateUser)
      .addSuccess(Single(User, 201))
      .annotate(RequiredScopes, ["users:write"])
  )
  .add(
    HttpApiEndpoint.get("getUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .annotate(OpenApi.Summary, "Get a user")
      .addSuccess(Single(User))
      .annotate(RequiredScopes, ["users:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .annotate(OpenApi.Summary, "Update a user")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateActor)
      .addSuccess(Single(User))
      .annotate(RequiredScopes, ["users:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .annotate(OpenApi.Summary, "Delete a user")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["users:write"])
  )
  .middleware(ServiceKey)
{}

export class ServiceActorsApi extends HttpApiGroup.make("service-actors")
  .annotate(OpenApi.Description, "Non-human actors of an environment: what service keys act as.")
  .add(
    HttpApiEndpoint.get("listServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors`
      .annotate(OpenApi.Summary, "List service actors")
      .setUrlParams(ListParams)
      .addSuccess(List(ServiceActor))
      .annotate(RequiredScopes, ["service-actors:read"])
  )
  .add(
    HttpApiEndpoint.post("createServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors`
      .annotate(OpenApi.Summary, "Create a service actor")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateServiceActor)
      .addSuccess(Single(ServiceActor, 201))
      .annotate(RequiredScopes, ["service-actors:write"])
  )
  .add(
    HttpApiEndpoint.get("getServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors/${serviceActorId}`
      .annotate(OpenApi.Summary, "Get a service actor")
      .addSuccess(Single(ServiceActor))
      .annotate(RequiredScopes, ["service-actors:read"])
  )
  .middleware(ServiceKey)
{}
