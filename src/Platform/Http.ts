/** Handlers of the platform plane: each reads like its contract row. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "../Api.js"
import type { DeletionJob } from "../Domain/Platform.js"
import { setResponseHeader } from "../Kernel/RequestContext.js"
import { CurrentPrincipal } from "../Kernel/Principal.js"
import { Platform } from "../Platform.js"
import { ownCell, ownTenant } from "../Kernel/Policy.js"

/** 202 responses carry `Location`: the deletion job to poll. */
const accepted = (tenantId: string, environment: string) => (job: DeletionJob) =>
  Effect.as(
    setResponseHeader("location", `/v1/tenants/${tenantId}/environments/${environment}/deletion-jobs/${job.id}`),
    job
  )

export const TenantsLive = HttpApiBuilder.group(Api, "tenants", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listTenants", ({ urlParams }) =>
        Effect.flatMap(CurrentPrincipal, (p) => platform.listTenants(p, urlParams)))
      .handle("getTenant", ({ path }) => Effect.flatMap(ownTenant(path.tenant_id), platform.getTenant))
      .handle("updateTenant", ({ path, payload }) =>
        Effect.flatMap(ownTenant(path.tenant_id), (p) => platform.updateTenant(p, payload.name)))
      .handle("deleteTenant", ({ path }) =>
        Effect.flatMap(ownTenant(path.tenant_id), (p) =>
          Effect.flatMap(platform.deleteTenant(p), accepted(p.tenantId, p.environment))))))

export const EnvironmentsLive = HttpApiBuilder.group(Api, "environments", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listEnvironments", ({ path, urlParams }) =>
        Effect.flatMap(ownTenant(path.tenant_id), (p) => platform.listEnvironments(p, urlParams)))
      .handle("getEnvironment", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), platform.getEnvironment))
      .handle("deleteEnvironment", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          Effect.flatMap(platform.deleteEnvironment(p), accepted(p.tenantId, p.environment))))
      .handle("getDeletionJob", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          platform.getDeletionJob(p, path.deletion_job_id)))))

export const ApiKeysLive = HttpApiBuilder.group(Api, "api-keys", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listApiKey", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.listApiKeys(p, urlParams)))
      .handle("getApiKey", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.getApiKey(p, path.key_id)))
      .handle("revokeApiKey", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.revokeApiKey(p, path.key_id)))))

export const UsersLive = HttpApiBuilder.group(Api, "users", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listUser", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.listUsers(p, urlParams)))
      .handle("createUser", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.createUser(p, payload)))
      .handle("getUser", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.getUser(p, path.user_id)))
      .handle("updateUser", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.updateUser(p, path.user_id, payload)))
      .handle("deleteUser", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          Effect.flatMap(platform.deleteUser(p, path.user_id), accepted(p.tenantId, p.environment))))))

export const ServiceActorsLive = HttpApiBuilder.group(Api, "service-actors", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listServiceActor", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.listServiceActors(p, urlParams)))
      .handle("createServiceActor", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => platform.createServiceActor(p, payload.name)))
      .handle("getServiceActor", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          platform.getServiceActor(p, path.service_actor_id)))))
