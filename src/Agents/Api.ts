/** Workspaces, model profiles, agents and agent revisions (D12). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import {
  Agent,
  AgentRevision,
  CreateAgent,
  CreateAgentRevision,
  CreateModelProfile,
  CreateWorkspace,
  ModelProfile,
  Workspace
} from "../Domain/Agents.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List, Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const workspaceId = idParam("workspace_id")
const modelProfileId = idParam("model_profile_id")
const agentId = idParam("agent_id")
const revisionId = idParam("revision_id")

export class WorkspacesApi extends HttpApiGroup.make("workspaces")
  .annotate(OpenApi.Description, "Workspaces group agents and conversations; the quickstart key may use only its own.")
  .add(
    HttpApiEndpoint.get("listWorkspace")`/v1/tenants/${tenantId}/environments/${environment}/workspaces`
      .annotate(OpenApi.Summary, "List workspaces")
      .setUrlParams(ListParams)
      .addSuccess(List(Workspace))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .add(
    HttpApiEndpoint.post("createWorkspace")`/v1/tenants/${tenantId}/environments/${environment}/workspaces`
      .annotate(OpenApi.Summary, "Create a workspace")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateWorkspace)
      .addSuccess(Single(Workspace, 201))
      .annotate(RequiredScopes, ["agents:write"])
  )
  .add(
    HttpApiEndpoint.get("getWorkspace")`/v1/tenants/${tenantId}/environments/${environment}/workspaces/${workspaceId}`
      .annotate(OpenApi.Summary, "Get a workspace")
      .addSuccess(Single(Workspace))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .middleware(ServiceKey)
{}

export class ModelProfilesApi extends HttpApiGroup.make("model-profiles")
  .annotate(OpenApi.Description, "Model providers and models, with their write-only credentials, that agent revisions run on.")
  .add(
    HttpApiEndpoint.get("listModelProfile")`/v1/tenants/${tenantId}/environments/${environment}/model-profiles`
      .annotate(OpenApi.Summary, "List model profiles")
      .setUrlParams(ListParams)
      .addSuccess(List(ModelProfile))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .add(
    HttpApiEndpoint.post("createModelProfile")`/v1/tenants/${tenantId}/environments/${environment}/model-profiles`
      .annotate(OpenApi.Summary, "Create a model profile")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateModelProfile)
      .addSuccess(Single(ModelProfile, 201))
      .annotate(
        OpenApi.Description,
        "`credential` is write-only: stored encrypted, never returned (responses show `has_credential`). " +
          "`settings` depend on `provider` (the request is a union discriminated by it): `openai_compatible` needs " +
          "`base_url`, a public `https://` URL (the destination rules of customer tools; its calls are checked again on " +
          "the connected address); `scripted` needs `steps` (a malformed step is 400 `parameter_invalid` naming it, " +
          "e.g. `settings.steps.2`)."
      )
      .annotate(Refusals, [
        {
          code: "destination_refused",
          param: "settings.base_url",
          when:
            "`openai_compatible`: `settings.base_url` is not a public `https://` destination: a local, private, link-local or metadata host or address, a name that does not resolve only to public addresses, or plain `http://`, unless the operator's `DESTINATION_ALLOWLIST` admits it"
        },
        {
          code: "parameter_invalid",
          param: "settings.steps",
          when: "`scripted`: the last step is a `sleep`; the last step repeats, so the model would never answer"
        }
      ])
      .annotate(RequiredScopes, ["agents:write"])
  )
  .add(
    HttpApiEndpoint.get("getModelProfile")`/v1/tenants/${tenantId}/environments/${environment}/model-profiles/${modelProfileId}`
      .annotate(OpenApi.Summary, "Get a model profile")
      .addSuccess(Single(ModelProfile))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .middleware(ServiceKey)
{}

export class AgentsApi extends HttpApiGroup.make("agents")
  .annotate(OpenApi.Description, "Agents: named configurations whose behaviour is fixed by immutable revisions.")
  .add(
    HttpApiEndpoint.get("listAgent")`/v1/tenants/${tenantId}/environments/${environment}/agents`
      .annotate(OpenApi.Summary, "List agents")
      .setUrlParams(ListParams)
      .addSuccess(List(Agent))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .add(
    HttpApiEndpoint.post("createAgent")`/v1/tenants/${tenantId}/environments/${environment}/agents`
      .annotate(OpenApi.Summary, "Create an agent")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateAgent)
      .addSuccess(Single(Agent, 201))
      .annotate(RequiredScopes, ["agents:write"])
  )
  .add(
    HttpApiEndpoint.get("getAgent")`/v1/tenants/${tenantId}/environments/${environment}/agents/${agentId}`
      .annotate(OpenApi.Summary, "Get an agent")
      .addSuccess(Single(Agent))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .middleware(ServiceKey)
{}

export class RevisionsApi extends HttpApiGroup.make("revisions")
  .annotate(OpenApi.Description, "Immutable agent revisions (instructions, model profile, tools) that conversations and runs pin.")
  .add(
    HttpApiEndpoint.get("listAgentRevision")`/v1/tenants/${tenantId}/environments/${environment}/agents/${agentId}/revisions`
      .annotate(OpenApi.Summary, "List an agent's revisions")
      .setUrlParams(ListParams)
      .addSuccess(List(AgentRevision))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .add(
    HttpApiEndpoint.post("createAgentRevision")`/v1/tenants/${tenantId}/environments/${environment}/agents/${agentId}/revisions`
      .annotate(OpenApi.Summary, "Create an agent revision")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateAgentRevision)
      .addSuccess(Single(AgentRevision, 201))
      .annotate(
        OpenApi.Description,
        "Revisions are immutable (no update or delete; the database refuses both). " +
          "`tool_ids` name tools of reviewed connections of this environment, no two with the same name. " +
          "Without `model_profile_id`, the revision pins the environment's `default_model_profile_id` (settings). " +
          "`memory: true` offers its runs the built-in tools `memory_get` and `memory_put` (the workspace's memory); " +
          "then no tool of `tool_ids` may have either name (400 `tool_name_reserved`)."
      )
      .annotate(Refusals, [
        {
          code: "parameter_missing",
          param: "model_profile_id",
          when: "`model_profile_id` is omitted and the environment has no `default_model_profile_id`"
        },
        {
          code: "unknown_tool",
          param: "tool_ids.N",
          when: "a tool id is not a tool of an active (reviewed) connection of this environment"
        },
        {
          code: "parameter_invalid",
          param: "tool_ids.N",
          when: "two of the tools have the same name: the model could not tell them apart"
        },
        {
          code: "tool_name_reserved",
          param: "tool_ids.N",
          when: "`memory` is true and a tool is named `memory_get` or `memory_put`, the names of the built-in memory tools"
        }
      ])
      .annotate(RequiredScopes, ["agents:write"])
  )
  .add(
    HttpApiEndpoint.get("getAgentRevision")`/v1/tenants/${tenantId}/environments/${environment}/agent-revisions/${revisionId}`
      .annotate(OpenApi.Summary, "Get an agent revision")
      .annotate(OpenApi.Description, "Revisions are addressed on their own (runs and conversations pin a revision id).")
      .addSuccess(Single(AgentRevision))
      .annotate(RequiredScopes, ["agents:read"])
  )
  .middleware(ServiceKey)
{}
