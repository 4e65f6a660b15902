/** SQL of workspaces, model profiles, agents and revisions. Rows decoded in, resources out. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import type { Sealed } from "../Crypto/Secrets.js"
import * as Rows from "../Database/Rows.js"
import { type Agent, type AgentRevision, type ModelProfile, Provider, type Workspace } from "../Domain/Agents.js"
import { toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import { RevisionContext, revisionContextQuery } from "./Queries.js"

export const WorkspaceRow = Schema.Struct({ id: Schema.String, name: Schema.String, created_at: Rows.Time, updated_at: Rows.Time })
export type WorkspaceRow = typeof WorkspaceRow.Type

export const ModelProfileRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  provider: Provider,
  model: Schema.String,
  settings: Rows.JsonObject,
  has_credential: Schema.Boolean,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type ModelProfileRow = typeof ModelProfileRow.Type

export const AgentRow = Schema.Struct({
  id: Schema.String,
  workspace_id: Schema.String,
  name: Schema.String,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type AgentRow = typeof AgentRow.Type

export const AgentRevisionRow = Schema.Struct({
  id: Schema.String,
  agent_id: Schema.String,
  model_profile_id: Schema.String,
  instructions: Schema.String,
  tool_ids: Schema.Array(Schema.String),
  memory: Schema.Boolean,
  content_hash: Schema.String,
  created_at: Rows.Time
})
export type AgentRevisionRow = typeof AgentRevisionRow.Type

const CredentialRow = Schema.Struct({
  credential_ciphertext: Schema.NullOr(Rows.Bytes),
  credential_iv: Schema.NullOr(Rows.Bytes),
  credential_tag: Schema.NullOr(Rows.Bytes)
})

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
  memory: r.memory,
  content_hash: r.content_hash,
  created_at: toIso(r.created_at)
})

/** Never selects the credential columns: only whether there is one. */
const MODEL_PROFILE_COLUMNS =
  "id, name, provider, model, settings, (credential_ciphertext IS NOT NULL) AS has_credential, created_at, updated_at"
const AGENT_REVISION_COLUMNS = "id, agent_id, model_profile_id, instructions, tool_ids, memory, content_hash, created_at"

export class AgentsRepo extends Effect.Service<AgentsRepo>()("AgentsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const after = (cursor: string | undefined) => (cursor === undefined ? sql`TRUE` : sql`id < ${cursor}`)
    const profileColumns = sql.literal(MODEL_PROFILE_COLUMNS)
    const revisionColumns = sql.literal(AGENT_REVISION_COLUMNS)

    return {
      workspaces: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql`SELECT id, name, created_at, updated_at FROM workspaces
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(WorkspaceRow)),
      workspace: (tenantId: string, env: string, id: string) =>
        sql`SELECT id, name, created_at, updated_at FROM workspaces
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(WorkspaceRow)),
      insertWorkspace: (w: { id: string; cell: CellRef; name: string; at: Date }) =>
        sql`INSERT INTO workspaces (id, tenant_id, environment, name, created_at, updated_at)
          VALUES (${w.id}, ${w.cell.tenantId}, ${w.cell.environment}, ${w.name}, ${w.at}, ${w.at})
          RETURNING id, name, created_at, updated_at`.pipe(Rows.single(WorkspaceRow)),
      modelProfiles: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql`SELECT ${profileColumns} FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ModelProfileRow)),
      modelProfile: (tenantId: string, env: string, id: string) =>
        sql`SELECT ${profileColumns} FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(ModelProfileRow)),
      insertModelProfile: (m: {
        id: string
        cell: CellRef
        name: string
        provider: Provider
        model: string
        settings: Record<string, unknown>
        credential: Sealed | undefined
        at: Date
      }) =>
        sql`INSERT INTO model_profiles (id, tenant_id, environment, name, provider, model, settings,
                                        credential_ciphertext, credential_iv, credential_tag, created_at, updated_at)
          VALUES (${m.id}, ${m.cell.tenantId}, ${m.cell.environment}, ${m.name}, ${m.provider}, ${m.model},
                  ${JSON.stringify(m.settings)}::jsonb, ${m.credential?.ciphertext ?? null}, ${m.credential?.iv ?? null},
                  ${m.credential?.tag ?? null}, ${m.at}, ${m.at})
          RETURNING ${profileColumns}`.pipe(Rows.single(ModelProfileRow)),
      credential: (tenantId: string, env: string, id: string) =>
        sql`SELECT credential_ciphertext, credential_iv, credential_tag FROM model_profiles
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(CredentialRow)),
      agents: (tenantId: string, env: string, cursor: string | undefined, limit: number) =>
        sql`SELECT id, workspace_id, name, created_at, updated_at FROM agents
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(AgentRow)),
      agent: (tenantId: string, env: string, id: string) =>
        sql`SELECT id, workspace_id, name, created_at, updated_at FROM agents
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(AgentRow)),
      insertAgent: (a: { id: string; cell: CellRef; workspaceId: string; name: string; at: Date }) =>
        sql`INSERT INTO agents (id, tenant_id, environment, workspace_id, name, created_at, updated_at)
          VALUES (${a.id}, ${a.cell.tenantId}, ${a.cell.environment}, ${a.workspaceId}, ${a.name}, ${a.at}, ${a.at})
          RETURNING id, workspace_id, name, created_at, updated_at`.pipe(Rows.single(AgentRow)),
      revisions: (tenantId: string, env: string, agentId: string, cursor: string | undefined, limit: number) =>
        sql`SELECT ${revisionColumns} FROM agent_revisions
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND agent_id = ${agentId} AND ${after(cursor)}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(AgentRevisionRow)),
      revision: (tenantId: string, env: string, id: string) =>
        sql`SELECT ${revisionColumns} FROM agent_revisions
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND id = ${id}`.pipe(Rows.maybe(AgentRevisionRow)),
      /** The workspace of a revision's agent (conversations pin a revision of their own workspace). */
      revisionWorkspace: (tenantId: string, env: string, id: string) =>
        sql`SELECT a.workspace_id FROM agent_revisions r JOIN agents a ON a.id = r.agent_id
          WHERE r.id = ${id} AND r.tenant_id = ${tenantId} AND r.environment = ${env}`.pipe(
          Rows.maybe(Schema.Struct({ workspace_id: Schema.String })),
          Effect.map((r) => r?.workspace_id)
        ),
      insertRevision: (r: {
        id: string
        cell: CellRef
        agentId: string
        modelProfileId: string
        instructions: string
        toolIds: ReadonlyArray<string>
        memory: boolean
        contentHash: string
        at: Date
      }) =>
        sql`INSERT INTO agent_revisions (id, tenant_id, environment, agent_id, model_profile_id, instructions,
                                         tool_ids, memory, content_hash, created_at)
          VALUES (${r.id}, ${r.cell.tenantId}, ${r.cell.environment}, ${r.agentId}, ${r.modelProfileId}, ${r.instructions},
                  ${[...r.toolIds] as Array<string>}::text[], ${r.memory}, ${r.contentHash}, ${r.at})
          RETURNING ${revisionColumns}`.pipe(Rows.single(AgentRevisionRow)),
      /** The environment's default model profile (its settings, D16), if it has one. */
      defaultModelProfile: (tenantId: string, env: string) =>
        sql`SELECT default_model_profile_id FROM environment_settings
          WHERE tenant_id = ${tenantId} AND environment = ${env} AND default_model_profile_id IS NOT NULL`.pipe(
          Rows.maybe(Schema.Struct({ default_model_profile_id: Schema.String })),
          Effect.map((r) => r?.default_model_profile_id)
        ),
      /** What a run needs to call the model: the pinned revision and its model profile. */
      revisionContext: (revisionId: string) => revisionContextQuery(sql, revisionId).pipe(Rows.maybe(RevisionContext))
    } as const
  })
}) {}
