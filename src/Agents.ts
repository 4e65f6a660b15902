/**
 * Workspaces, model profiles, agents and immutable agent revisions (D12). Model profile
 * credentials are write-only: encrypted with `Secrets` (bound to the profile id) before they reach
 * the database, never selected for a response (`has_credential` instead), and read back only
 * through `credentialOf` for the model providers.
 */
import { createHash } from "node:crypto"

import { Clock, Effect, Option, ParseResult, type Redacted, Schema } from "effect"

import type { RevisionContext } from "./Agents/Queries.js"
import * as Repo from "./Agents/Repo.js"
import { Secrets } from "./Crypto/Secrets.js"
import { dieOnSqlError } from "./Database/Defects.js"
import {
  type CreateAgentRevision,
  type CreateModelProfile,
  OpenAiCompatibleSettings,
  type Provider,
  ScriptedSettings
} from "./Domain/Agents.js"
import { isMemoryTool } from "./Domain/Memory.js"
import * as Cursor from "./Kernel/Cursor.js"
import { invalid, notFound } from "./Kernel/Errors.js"
import { makeId } from "./Kernel/Ids.js"
import { canonicalJson } from "./Kernel/Json.js"
import type { Gated } from "./Kernel/Policy.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { Destinations } from "./Outbound/Destinations.js"
import { Tools } from "./Tools.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

/**
 * Lowercase hex SHA-256 of the canonical JSON of a revision's content. `memory` counts only when
 * true, so the hashes of revisions made before it existed (and of those without it) are unchanged.
 */
export const contentHash = (
  content: { model_profile_id: string; instructions: string; tool_ids: ReadonlyArray<string>; memory?: boolean | undefined }
) =>
  createHash("sha256")
    .update(canonicalJson({
      model_profile_id: content.model_profile_id,
      instructions: content.instructions,
      tool_ids: content.tool_ids,
      ...(content.memory === true ? { memory: true } : {})
    }))
    .digest("hex")

/**
 * Checks `settings` for the provider. The first problem becomes a 400 naming its parameter:
 * `settings.steps.N` for a malformed scripted step, else the path of the offending field.
 */
const checkSettings = (provider: Provider, settings: Record<string, unknown>) => {
  const schema = provider === "scripted"
    ? ScriptedSettings
    : provider === "openai_compatible"
    ? OpenAiCompatibleSettings
    : undefined
  if (schema === undefined) return Effect.void
  if (provider === "scripted" && Array.isArray(settings.steps) && settings.steps.length === 0) {
    return Effect.fail(invalid("parameter_invalid", "settings.steps: must be a non-empty list of steps", "settings.steps"))
  }
  return Effect.mapError(
    Schema.decodeUnknown(schema as Schema.Schema<unknown, unknown>)(settings, { errors: "first" }),
    (error) => {
      const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
      const path = (issue?.path ?? []).map(String)
      const param = ["settings", ...(path[0] === "steps" ? path.slice(0, 2) : path)].join(".")
      const detail = ["settings", ...path].join(".")
      return invalid(
        issue?._tag === "Missing" ? "parameter_missing" : "parameter_invalid",
        `${detail}: ${issue?.message ?? "is invalid"}`,
        param
      )
    }
  )
}

export class Agents extends Effect.Service<Agents>()("Agents", {
  effect: Effect.gen(function*() {
    const repo = yield* Repo.AgentsRepo
    const secrets = yield* Secrets
    const tools = yield* Tools
    const destinations = yield* Destinations

    // ---- workspaces -------------------------------------------------------------------------
    const workspaceRow = (p: CellRef, id: string, param = "workspace_id") =>
      Effect.flatMap(
        repo.workspace(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(row) : Effect.fail(notFound("workspace", param))
      )

    const createWorkspace = (p: CellRef, body: { name: string }) =>
      Effect.gen(function*() {
        const row = yield* repo.insertWorkspace({ id: yield* makeId("ws"), cell: p, name: body.name, at: yield* now })
        return Repo.toWorkspace(row)
      })

    // ---- model profiles ---------------------------------------------------------------------
    const createModelProfile = (p: CellRef, body: CreateModelProfile) =>
      Effect.gen(function*() {
        const settings = body.settings ?? {}
        yield* checkSettings(body.provider, settings)
        if (body.provider === "openai_compatible") {
          // the customer's model server: the same destination rules as customer tools (D10)
          yield* destinations.checkRegistration(String(settings.base_url), "settings.base_url")
        }
        const at = yield* now
        const id = yield* makeId("mp")
        const sealed = body.credential === undefined ? undefined : yield* secrets.encrypt(body.credential, id)
        const row = yield* repo.insertModelProfile({
          id,
          cell: p,
          name: body.name,
          provider: body.provider,
          model: body.model,
          settings,
          credential: sealed,
          at
        })
        return Repo.toModelProfile(row)
      })

    const modelProfileRow = (p: CellRef, id: string) =>
      Effect.flatMap(
        repo.modelProfile(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(row) : Effect.fail(notFound("model profile", "model_profile_id"))
      )

    /** The decrypted credential of a profile of the cell, for the model providers; never for a response. */
    const credentialOf = (tenantId: string, environment: string, profileId: string) =>
      Effect.flatMap(repo.credential(tenantId, environment, profileId), (row) => unseal(row, profileId))

    /** A profile's credential from its sealed columns (none when it has none). */
    const unseal = (
      row: Pick<RevisionContext, "credential_ciphertext" | "credential_iv" | "credential_tag"> | undefined,
      profileId: string
    ) =>
      Effect.gen(function*() {
        if (!row || row.credential_ciphertext === null || row.credential_iv === null || row.credential_tag === null) {
          return Option.none<Redacted.Redacted<string>>()
        }
        const plain = yield* Effect.orDie(secrets.decrypt({
          ciphertext: row.credential_ciphertext,
          iv: row.credential_iv,
          tag: row.credential_tag
        }, profileId))
        return Option.some(plain)
      })

    // ---- agents -----------------------------------------------------------------------------
    const agentRow = (p: CellRef, id: string) =>
      Effect.flatMap(
        repo.agent(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(row) : Effect.fail(notFound("agent", "agent_id"))
      )

    const createAgent = (p: CellRef, body: { workspace_id: string; name: string }) =>
      Effect.gen(function*() {
        yield* workspaceRow(p, body.workspace_id)
        const row = yield* repo.insertAgent({
          id: yield* makeId("agent"),
          cell: p,
          workspaceId: body.workspace_id,
          name: body.name,
          at: yield* now
        })
        return Repo.toAgent(row)
      })

    // ---- revisions --------------------------------------------------------------------------
    const createRevision = (p: CellRef, agentId: string, body: CreateAgentRevision) =>
      Effect.gen(function*() {
        yield* agentRow(p, agentId)
        // Only reviewed tools of this tenant and environment, with distinct names.
        const toolRows = yield* tools.toolsForRevision(p, body.tool_ids)
        const memory = body.memory === true
        // The built-in memory tools (D14) take their names: the model could not tell them apart.
        const shadowing = memory ? toolRows.findIndex((t) => isMemoryTool(t.name)) : -1
        if (shadowing >= 0) {
          return yield* invalid(
            "tool_name_reserved",
            `tool_ids.${shadowing}: a revision with memory has the built-in tool "${toolRows[shadowing]!.name}"; ` +
              "a tool of the same name cannot be added",
            `tool_ids.${shadowing}`
          )
        }
        // Without one, the environment's default (settings, D16): the revision pins it like any other.
        const modelProfileId = body.model_profile_id ?? (yield* repo.defaultModelProfile(p.tenantId, p.environment))
        if (modelProfileId === undefined) {
          return yield* invalid(
            "parameter_missing",
            "model_profile_id is required: this environment has no default_model_profile_id",
            "model_profile_id"
          )
        }
        yield* modelProfileRow(p, modelProfileId)
        const row = yield* repo.insertRevision({
          id: yield* makeId("rev"),
          cell: p,
          agentId,
          modelProfileId,
          instructions: body.instructions,
          toolIds: body.tool_ids,
          memory,
          contentHash: contentHash({ ...body, model_profile_id: modelProfileId, memory }),
          at: yield* now
        })
        return Repo.toAgentRevision(row)
      })

    const listRevisions = (p: Principal, agentId: string, params: Cursor.ListParams) =>
      Effect.zipRight(
        agentRow(p, agentId),
        Cursor.listPage(
          `agent_revisions:${agentId}`,
          (t, e, after, limit) => repo.revisions(t, e, agentId, after, limit),
          Repo.toAgentRevision
        )(p, params)
      )

    const getRevision = (p: Principal, id: string) =>
      Effect.flatMap(
        repo.revision(p.tenantId, p.environment, id),
        (row) => row ? Effect.succeed(Repo.toAgentRevision(row)) : Effect.fail(notFound("agent revision", "revision_id"))
      )

    const listWorkspaces = Cursor.listPage("workspaces", repo.workspaces, Repo.toWorkspace)
    const listModelProfiles = Cursor.listPage("model_profiles", repo.modelProfiles, Repo.toModelProfile)
    const listAgents = Cursor.listPage("agents", repo.agents, Repo.toAgent)

    return {
      listWorkspaces: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listWorkspaces(p, params)),
      createWorkspace: (p: Gated<CellRef>, body: { name: string }) => dieOnSqlError(createWorkspace(p, body)),
      getWorkspace: (p: Principal, id: string) => dieOnSqlError(Effect.map(workspaceRow(p, id), Repo.toWorkspace)),
      listModelProfiles: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listModelProfiles(p, params)),
      createModelProfile: (p: Gated<CellRef>, body: CreateModelProfile) => dieOnSqlError(createModelProfile(p, body)),
      getModelProfile: (p: Principal, id: string) => dieOnSqlError(Effect.map(modelProfileRow(p, id), Repo.toModelProfile)),
      credentialOf: (tenantId: string, environment: string, profileId: string) =>
        dieOnSqlError(credentialOf(tenantId, environment, profileId)),
      /** The workspace of a revision's agent, if the revision is of the cell. */
      revisionWorkspace: (p: CellRef, revisionId: string) => dieOnSqlError(repo.revisionWorkspace(p.tenantId, p.environment, revisionId)),
      /** A run's pinned revision with its model profile (none when it is gone). */
      revisionContext: (revisionId: string) => dieOnSqlError(repo.revisionContext(revisionId)),
      /** The credential of a revision context's model profile, decrypted. */
      credentialOfContext: (context: RevisionContext) => unseal(context, context.model_profile_id),
      listAgents: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listAgents(p, params)),
      createAgent: (p: Gated<CellRef>, body: { workspace_id: string; name: string }) => dieOnSqlError(createAgent(p, body)),
      getAgent: (p: Principal, id: string) => dieOnSqlError(Effect.map(agentRow(p, id), Repo.toAgent)),
      listRevisions: (p: Principal, agentId: string, params: Cursor.ListParams) => dieOnSqlError(listRevisions(p, agentId, params)),
      createRevision: (p: Gated<CellRef>, agentId: string, body: CreateAgentRevision) => dieOnSqlError(createRevision(p, agentId, body)),
      getRevision: (p: Principal, id: string) => dieOnSqlError(getRevision(p, id))
    } as const
  }),
  dependencies: [Repo.AgentsRepo.Default, Secrets.Default, Tools.Default, Destinations.Default]
}) {}
