/** SQL of workspaces, model profiles, agents and revisions. Rows in, resources out. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { type Agent, type AgentRevision, type ModelProfile, Provider, type Workspace } from "../Domain/Agents.js"
import { toIso } from "../Kernel/Ids.js"
import * as Rows from "../Database/Rows.js"
import { Schema } from "effect"

export interface WorkspaceRow { id: string; name: string; created_at: Date; updated_at: Date }
export interface ModelProfileRow {
  id: string
  name: string
  provider: Provider
  model: string
  settings: Record<string, unknown>
  has_credential: boolean
  created_at: Date
  updated_at: Date
}
export interface AgentRow { id: string; workspace_id: string; name: string; created_at: Date; updated_at: Date }
export interface AgentRevisionRow {
  id: string
  agent_id: string
  model_profile_id: string
  instructions: string
  tool_ids: ReadonlyArray<string>
  content_hash: string
  created_at: Date
}
export interface CredentialRow {
  credential_ciphertext: Uint8Array | null
  credential_iv: Uint8Array | null
  credential_tag: Uint8Array | null
}

/** The pinned revision of a run and its model profile: what a model step is called with. */
export const RevisionContext = Schema.Struct({
  instructions: Schema.String,
  tool_ids: Schema.Array(Schema.String),
  model_profile_id: Schema.String,
  provider: Provider,
  model: Schema.String,
  settings: Rows.JsonObject
})
export type RevisionContext = typeof RevisionContext.Type

export const toWorkspace = (r: WorkspaceRow): Workspace => ({
  id: r.id,
  object: "workspace",
  name: r.name,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toModelProfile = (r: ModelProfileRow): ModelProfile => ({
  id: r.id,
  object: "model_profile",
  name: r.name,
  provider: r.provider,
  model: r.model,
  settings: r.settings,
  has_credential: r.has_credential,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toAgent = (r: AgentRow): Agent => ({
  id: r.id,
  object: "agent",
  workspace_id: r.workspace_id,
  name: r.name,
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})
export const toAgentRevision = (r: AgentRevisionRow): AgentRevision => ({
  id: r.id,
  object: "agent_revision",
  agent_id: r.agent_id,
  model_profile_id: r.model_profile_id,
  instructions: r.instructions,
  tool_ids: r.tool_ids,
  content_hash: r.content_hash,
  created_at: toIso(r.created_at)
})

/** Never selects the credential columns: only whether there is one. */
export const MODEL_PROFILE_COLUMNS =
  "id, name, provider, model, settings, (credential_ciphertext IS NOT NULL) AS has_credential, created_at, updated_at"
export const AGENT_REVISION_COLUMNS = "id, agent_id, model_profile_id, instructions, tool_ids, content_hash, created_at"

export class AgentsRepo extends Effect.Service<AgentsRepo>()("AgentsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const after = (cursor: string | undefined) => (cursor === undefined ? sql`TRUE` : sql`id < ${cursor}`)
    const first = <A>(rows: ReadonlyArray<A>) => rows[0]

    return {
      workspaces: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<WorkspaceRow>`SELECT id, name, created_at, updated_at FROM workspaces
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      workspace: (tenantId: string, env: string, id: string) =>
        sql<WorkspaceRow>`SELECT id, name, created_at, updated_at FROM workspaces
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map(first)),
      modelProfiles: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<ModelProfileRow>`SELECT ${sql.literal(MODEL_PROFILE_COLUMNS)} FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      modelProfile: (tenantId: string, env: string, id: string) =>
        sql<ModelProfileRow>`SELECT ${sql.literal(MODEL_PROFILE_COLUMNS)} FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map(first)),
      credential: (tenantId: string, env: string, id: string) =>
        sql<CredentialRow>`SELECT credential_ciphertext, credential_iv, credential_tag FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map(first)),
      agents: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql<AgentRow>`SELECT id, workspace_id, name, created_at, updated_at FROM agents
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      agent: (tenantId: string, env: string, id: string) =>
        sql<AgentRow>`SELECT id, workspace_id, name, created_at, updated_at FROM agents
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map(first)),
      revisions: (tenantId: string, env: string, agentId: string, cursor: string | undefined, limit: number) =>
        sql<AgentRevisionRow>`SELECT ${sql.literal(AGENT_REVISION_COLUMNS)} FROM agent_revisions
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND agent_id = ${agentId} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`,
      /** What a run needs to call the model: the pinned revision and its model profile. */
      revisionContext: (revisionId: string) =>
        sql`SELECT rv.instructions, rv.tool_ids, mp.id AS model_profile_id, mp.provider, mp.model, mp.settings
            FROM agent_revisions rv JOIN model_profiles mp ON mp.id = rv.model_profile_id
            WHERE rv.id = ${revisionId}`.pipe(Rows.maybe(RevisionContext)),
      revision: (tenantId: string, env: string, id: string) =>
        sql<AgentRevisionRow>`SELECT ${sql.literal(AGENT_REVISION_COLUMNS)} FROM agent_revisions
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Effect.map(first))
    } as const
  })
}) {}
