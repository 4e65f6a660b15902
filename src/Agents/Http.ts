/** Handlers of workspaces, model profiles, agents and revisions (D12). */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Agents } from "../Agents.js"
import { Api } from "../Api.js"
import { ownCell } from "../Kernel/Policy.js"

export const WorkspacesLive = HttpApiBuilder.group(Api, "workspaces", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listWorkspace", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.listWorkspaces(p, urlParams)))
      .handle("createWorkspace", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.createWorkspace(p, payload)))
      .handle("getWorkspace", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.getWorkspace(p, path.workspace_id)))))

export const ModelProfilesLive = HttpApiBuilder.group(Api, "model-profiles", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listModelProfile", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.listModelProfiles(p, urlParams)))
      .handle("createModelProfile", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.createModelProfile(p, payload)))
      .handle("getModelProfile", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          agents.getModelProfile(p, path.model_profile_id)))))

export const AgentsLive = HttpApiBuilder.group(Api, "agents", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listAgent", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.listAgents(p, urlParams)))
      .handle("createAgent", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.createAgent(p, payload)))
      .handle("getAgent", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.getAgent(p, path.agent_id)))))

export const RevisionsLive = HttpApiBuilder.group(Api, "revisions", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listAgentRevision", ({ path, urlParams }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          agents.listRevisions(p, path.agent_id, urlParams)))
      .handle("createAgentRevision", ({ path, payload }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) =>
          agents.createRevision(p, path.agent_id, payload)))
      .handle("getAgentRevision", ({ path }) =>
        Effect.flatMap(ownCell(path.tenant_id, path.environment), (p) => agents.getRevision(p, path.revision_id)))))
