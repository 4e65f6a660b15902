/** The platform plane of /v1 (contract part 4): tenants, environments, keys, users, service actors, deletion jobs. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import {
  ApiKey,
  CreateServiceActor,
  CreateUser,
  DeletionJob,
  Environment,
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

export class TenantsApi extends HttpApiGroup.make("tenants")
  .add(
    HttpApiEndpoint.get("listTenants", "/v1/tenants")
      .setUrlParams(ListParams)
      .addSuccess(List(Tenant))
      .annotate(RequiredScopes, ["tenants:read"])
  )
  .add(
    HttpApiEndpoint.get("getTenant")`/v1/tenants/${tenantId}`
      .addSuccess(Single(Tenant))
      .annotate(RequiredScopes, ["tenants:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateTenant")`/v1/tenants/${tenantId}`
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateTenant)
      .addSuccess(Single(Tenant))
      .annotate(RequiredScopes, ["tenants:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteTenant")`/v1/tenants/${tenantId}`
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["tenants:write"])
  )
  .middleware(ServiceKey)
{}

export class EnvironmentsApi extends HttpApiGroup.make("environments")
  .add(
    HttpApiEndpoint.get("listEnvironments")`/v1/tenants/${tenantId}/environments`
      .setUrlParams(ListParams)
      .addSuccess(List(Environment))
      .annotate(RequiredScopes, ["environments:read"])
  )
  .add(
    HttpApiEndpoint.get("getEnvironment")`/v1/tenants/${tenantId}/environments/${environment}`
      .addSuccess(Single(Environment))
      .annotate(RequiredScopes, ["environments:read"])
  )
  .add(
    HttpApiEndpoint.del("deleteEnvironment")`/v1/tenants/${tenantId}/environments/${environment}`
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["environments:write"])
  )
  .add(
    HttpApiEndpoint.get("getDeletionJob")`/v1/tenants/${tenantId}/environments/${environment}/deletion-jobs/${jobId}`
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
  .add(
    HttpApiEndpoint.get("listApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys`
      .setUrlParams(ListParams)
      .addSuccess(List(ApiKey))
      .annotate(RequiredScopes, ["keys:read"])
  )
  .add(
    HttpApiEndpoint.get("getApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys/${keyId}`
      .addSuccess(Single(ApiKey))
      .annotate(RequiredScopes, ["keys:read"])
  )
  .add(
    HttpApiEndpoint.post("revokeApiKey")`/v1/tenants/${tenantId}/environments/${environment}/api-keys/${keyId}/revoke`
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(ApiKey))
      .annotate(RequiredScopes, ["keys:revoke"])
  )
  .middleware(ServiceKey)
{}

export class UsersApi extends HttpApiGroup.make("users")
  .add(
    HttpApiEndpoint.get("listUser")`/v1/tenants/${tenantId}/environments/${environment}/users`
      .setUrlParams(ListParams)
      .addSuccess(List(User))
      .annotate(RequiredScopes, ["users:read"])
  )
  .add(
    HttpApiEndpoint.post("createUser")`/v1/tenants/${tenantId}/environments/${environment}/users`
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateUser)
      .addSuccess(Single(User, 201))
      .annotate(RequiredScopes, ["users:write"])
  )
  .add(
    HttpApiEndpoint.get("getUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .addSuccess(Single(User))
      .annotate(RequiredScopes, ["users:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateActor)
      .addSuccess(Single(User))
      .annotate(RequiredScopes, ["users:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteUser")`/v1/tenants/${tenantId}/environments/${environment}/users/${userId}`
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(DeletionJob))
      .annotate(RequiredScopes, ["users:write"])
  )
  .middleware(ServiceKey)
{}

export class ServiceActorsApi extends HttpApiGroup.make("service-actors")
  .add(
    HttpApiEndpoint.get("listServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors`
      .setUrlParams(ListParams)
      .addSuccess(List(ServiceActor))
      .annotate(RequiredScopes, ["service-actors:read"])
  )
  .add(
    HttpApiEndpoint.post("createServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors`
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateServiceActor)
      .addSuccess(Single(ServiceActor, 201))
      .annotate(RequiredScopes, ["service-actors:write"])
  )
  .add(
    HttpApiEndpoint.get("getServiceActor")`/v1/tenants/${tenantId}/environments/${environment}/service-actors/${serviceActorId}`
      .addSuccess(Single(ServiceActor))
      .annotate(RequiredScopes, ["service-actors:read"])
  )
  .middleware(ServiceKey)
{}
