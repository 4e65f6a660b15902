/**
 * The console quickstart (contract part 1, D1): per environment, a stable service actor, a
 * workspace and a no-tools agent revision (with its agent and model profile), made once when the
 * environment is provisioned and recorded in `quickstarts`. They are made through the ordinary
 * create paths of `Platform` and `Agents`, in one transaction with the record.
 *
 * An environment provisioned before quickstarts existed gets its quickstart on first use, once:
 * creators serialise on the environment's row (`FOR NO KEY UPDATE`, which does not block inserts
 * that merely reference the environment), and the table's primary key backs that up.
 *
 * The model is `scripted` (a friendly echo) unless the operator set `QUICKSTART_MODEL`; then the
 * provider's key becomes the profile's credential, encrypted like any other (`Agents`, `Secrets`).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Redacted } from "effect"

import { Agents } from "../Agents.js"
import { AppConfig, type QuickstartModel } from "../Config/AppConfig.js"
import { dieOnSqlError } from "../Database/Defects.js"
import type { CreateModelProfile } from "../Domain/Agents.js"
import type { Quickstart } from "../Domain/Operator.js"
import { notFound } from "../Kernel/Errors.js"
import type { EnvironmentName } from "../Kernel/Ids.js"
import { byOperator } from "../Kernel/Policy.js"
import type { CellRef } from "../Kernel/Principal.js"
import { traced } from "../Kernel/Spans.js"
import { Platform } from "../Platform.js"
import { OperatorRepo, type QuickstartRow } from "./Repo.js"

export const QUICKSTART_GREETING = "Hello from your sandbox agent. You said: {{input}}"
const INSTRUCTIONS = "You are the quickstart agent of this environment. Answer briefly and helpfully."

/** The quickstart's model profile; the key (if any) leaves its Redacted only to be encrypted. */
const profileOf = (model: QuickstartModel): CreateModelProfile =>
  model.provider === "scripted"
    ? {
      name: "Quickstart (scripted)",
      provider: "scripted",
      model: "scripted-1",
      settings: { steps: [{ type: "text", text: QUICKSTART_GREETING }] }
    }
    : {
      name: `Quickstart (${model.provider})`,
      provider: model.provider,
      model: model.model,
      credential: Redacted.value(model.apiKey)
    }

const toQuickstart = (r: QuickstartRow): Quickstart => ({
  service_actor_id: r.service_actor_id,
  workspace_id: r.workspace_id,
  agent_revision_id: r.agent_revision_id
})

export class Quickstarts extends Effect.Service<Quickstarts>()("Quickstarts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const platform = yield* Platform
    const agents = yield* Agents
    const repo = yield* OperatorRepo

    /** Makes the resources and the record; the caller holds the environment's row lock. */
    const create = (of: CellRef) =>
      Effect.gen(function*() {
        const cell = byOperator(of)
        const profile = profileOf(config.quickstartModel)
        const actor = yield* platform.createServiceActor(cell, "Quickstart")
        const workspace = yield* agents.createWorkspace(cell, { name: "Quickstart" })
        const modelProfile = yield* agents.createModelProfile(cell, profile)
        const agent = yield* agents.createAgent(cell, { workspace_id: workspace.id, name: "Quickstart agent" })
        const revision = yield* agents.createRevision(cell, agent.id, {
          model_profile_id: modelProfile.id,
          instructions: INSTRUCTIONS,
          tool_ids: []
        })
        const at = new Date(yield* Clock.currentTimeMillis)
        yield* repo.insertQuickstart({
          cell,
          serviceActorId: actor.id,
          workspaceId: workspace.id,
          agentId: agent.id,
          modelProfileId: modelProfile.id,
          agentRevisionId: revision.id,
          at
        })
        yield* Effect.logInfo("quickstart provisioned").pipe(Effect.annotateLogs({
          tenant_id: cell.tenantId,
          environment: cell.environment,
          agent_revision_id: revision.id,
          provider: modelProfile.provider,
          model: modelProfile.model
        }))
        return { service_actor_id: actor.id, workspace_id: workspace.id, agent_revision_id: revision.id }
      }).pipe(
        // Our own profile and revision cannot be refused: a refusal here is a bug, not a 4xx.
        Effect.catchTags({ InvalidRequest: Effect.die, NotFound: Effect.die })
      )

    /**
     * The environment's quickstart, made now if it has none. 404 for an unknown tenant or
     * environment, or one being deleted.
     */
    const ensure = (tenantId: string, environment: EnvironmentName) =>
      Effect.gen(function*() {
        const found = yield* repo.quickstart(tenantId, environment)
        if (found) return toQuickstart(found)
        return yield* sql.withTransaction(Effect.gen(function*() {
          if (!(yield* repo.lockLiveEnvironment(tenantId, environment))) return yield* notFound("environment", "environment")
          // Under the lock: another creator may have finished while this one waited.
          const again = yield* repo.quickstart(tenantId, environment)
          if (again) return toQuickstart(again)
          return yield* create({ tenantId, environment })
        }))
      }).pipe(traced("Quickstarts.ensure"))

    return {
      ensure: (tenantId: string, environment: EnvironmentName) => dieOnSqlError(ensure(tenantId, environment))
    } as const
  }),
  dependencies: [Platform.Default, Agents.Default, OperatorRepo.Default]
}) {}
