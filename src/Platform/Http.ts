/** Handlers of the platform plane: each reads like its contract row. */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell, inTenant } from "../Kernel/Policy.js"
import { CurrentPrincipal } from "../Kernel/Principal.js"
import { Platform } from "../Platform.js"

export const TenantsLive = HttpGroup.group(Api, "tenants", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listTenants", ({ urlParams }) => Effect.flatMap(CurrentPrincipal, (p) => platform.listTenants(p, urlParams)))
      .handle("getTenant", inTenant((p) => platform.getTenant(p)))
      .handle("updateTenant", inTenant((p, { payload }) => platform.updateTenant(p, payload.name)))
      .handle("deleteTenant", inTenant((p) => platform.deleteTenant(p)))))

export const EnvironmentsLive = HttpGroup.group(Api, "environments", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listEnvironments", inTenant((p, { urlParams }) => platform.listEnvironments(p, urlParams)))
      .handle("getEnvironment", inCell((p) => platform.getEnvironment(p)))
      .handle("deleteEnvironment", inCell((p) => platform.deleteEnvironment(p)))
      .handle("getDeletionJob", inCell((p, { path }) => platform.getDeletionJob(p, path.deletion_job_id)))))

export const ApiKeysLive = HttpGroup.group(Api, "api-keys", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listApiKey", inCell((p, { urlParams }) => platform.listApiKeys(p, urlParams)))
      .handle("getApiKey", inCell((p, { path }) => platform.getApiKey(p, path.key_id)))
      .handle("rotateApiKey", inCell((p, { path, payload }) => platform.rotateApiKey(p, path.key_id, payload.grace_seconds)))
      .handle("revokeApiKey", inCell((p, { path }) => platform.revokeApiKey(p, path.key_id)))))

export const UsersLive = HttpGroup.group(Api, "users", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listUser", inCell((p, { urlParams }) => platform.listUsers(p, urlParams)))
      .handle("createUser", inCell((p, { payload }) => platform.createUser(p, payload)))
      .handle("getUser", inCell((p, { path }) => platform.getUser(p, path.user_id)))
      .handle("updateUser", inCell((p, { path, payload }) => platform.updateUser(p, path.user_id, payload)))
      .handle("deleteUser", inCell((p, { path }) => platform.deleteUser(p, path.user_id)))))

export const ServiceActorsLive = HttpGroup.group(Api, "service-actors", (handlers) =>
  Effect.map(Platform, (platform) =>
    handlers
      .handle("listServiceActor", inCell((p, { urlParams }) => platform.listServiceActors(p, urlParams)))
      .handle("createServiceActor", inCell((p, { payload }) => platform.createServiceActor(p, payload.name)))
      .handle("getServiceActor", inCell((p, { path }) => platform.getServiceActor(p, path.service_actor_id)))))
