/** Handlers of workspaces, model profiles, agents and revisions (D12). */
import { Effect } from "effect"

import { Agents } from "../Agents.js"
import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"

export const WorkspacesLive = HttpGroup.group(Api, "workspaces", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listWorkspace", inCell((p, { urlParams }) => agents.listWorkspaces(p, urlParams)))
      .handle("createWorkspace", inCell((p, { payload }) => agents.createWorkspace(p, payload)))
      .handle("getWorkspace", inCell((p, { path }) => agents.getWorkspace(p, path.workspace_id)))))

export const ModelProfilesLive = HttpGroup.group(Api, "model-profiles", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listModelProfile", inCell((p, { urlParams }) => agents.listModelProfiles(p, urlParams)))
      .handle("createModelProfile", inCell((p, { payload }) => agents.createModelProfile(p, payload)))
      .handle("getModelProfile", inCell((p, { path }) => agents.getModelProfile(p, path.model_profile_id)))))

export const AgentsLive = HttpGroup.group(Api, "agents", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listAgent", inCell((p, { urlParams }) => agents.listAgents(p, urlParams)))
      .handle("createAgent", inCell((p, { payload }) => agents.createAgent(p, payload)))
      .handle("getAgent", inCell((p, { path }) => agents.getAgent(p, path.agent_id)))))

export const RevisionsLive = HttpGroup.group(Api, "revisions", (handlers) =>
  Effect.map(Agents, (agents) =>
    handlers
      .handle("listAgentRevision", inCell((p, { path, urlParams }) => agents.listRevisions(p, path.agent_id, urlParams)))
      .handle("createAgentRevision", inCell((p, { path, payload }) => agents.createRevision(p, path.agent_id, payload)))
      .handle("getAgentRevision", inCell((p, { path }) => agents.getRevision(p, path.revision_id)))))
