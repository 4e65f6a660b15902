/** Handlers of connections, tools, the key set, approvals, actor sessions and settings. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ActorSessions } from "../ActorSessions.js"
import { Api } from "../Api.js"
import { Approvals } from "../Approvals.js"
import { ownCell } from "../Kernel/Policy.js"
import { Tools } from "../Tools.js"
import { SigningKeys } from "./Signing.js"

export const ConnectionsLive = HttpApiBuilder.group(Api, "connections", (handlers) =>
  Effect.map(Tools, (tools) =>
    handlers
      .handle("createConnection", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => tools.register(p, payload)))
      .handle("listConnection", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => tools.listConnections(p, urlParams)))
      .handle("getConnection", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => tools.getConnection(p, path.connection_id)))
      .handle("listTool", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => tools.listTools(p, urlParams)))
      .handle("getTool", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => tools.getTool(p, path.tool_id)))))

export const KeySetLive = HttpApiBuilder.group(Api, "jwks", (handlers) =>
  Effect.map(SigningKeys, (signing) =>
    handlers.handle("getJwks", ({ path }) => signing.jwksOf(path.tenant_id, path.environment))))

export const ApprovalsLive = HttpApiBuilder.group(Api, "approvals", (handlers) =>
  Effect.map(Approvals, (approvals) =>
    handlers
      .handle("listApproval", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => approvals.list(p, urlParams)))
      .handle("getApproval", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => approvals.get(p, path.approval_id)))
      .handle("decideApproval", ({ headers, path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          approvals.decide(p, path.approval_id, headers["x-actor-token"], payload)))))

export const ActorSessionsLive = HttpApiBuilder.group(Api, "actor-sessions", (handlers) =>
  Effect.map(ActorSessions, (actors) =>
    handlers.handle("createActorSession", ({ path, payload }) =>
      Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => actors.createSession(p, payload)))))

export const SettingsLive = HttpApiBuilder.group(Api, "settings", (handlers) =>
  Effect.map(ActorSessions, (actors) =>
    handlers
      .handle("getSettings", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => actors.getSettings(p)))
      .handle("updateSettings", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => actors.updateSettings(p, payload)))))
