/**
 * The operator plane (D1): pilot applications, sandbox provisioning (with its quickstart) and
 * console-made keys.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"

import { Cells } from "./Cells/Cells.js"
import { ClusterNode, PlacementsRepo } from "./Cells/Placements.js"
import { cellKey, GetCellStats } from "./Cells/Protocol.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError } from "./Database/Defects.js"
import type { CellShare, PilotApplication } from "./Domain/Operator.js"
import type { CreatedApiKey } from "./Domain/Platform.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { type EnvironmentName, makeId, toIso } from "./Kernel/Ids.js"
import type { CellRef } from "./Kernel/Principal.js"
import { isScope, QUICKSTART_SCOPES, type Scope } from "./Kernel/Scopes.js"
import { type Resource, Shares } from "./Kernel/Shares.js"
import { auditAbout } from "./Kernel/UnitOfWork.js"
import { Quickstarts } from "./Operator/Quickstart.js"
import { type CellWeightRow, OperatorRepo, type PilotRow, type TenantEnvironmentRow } from "./Operator/Repo.js"
import { applyWeights } from "./Operator/Weights.js"
import { KeySecrets, PlatformRepo, PlatformRows as Rows } from "./Platform.js"
import { RunStore, toRun } from "./Runs.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

const toPilot = (r: PilotRow): PilotApplication => ({ ...r, object: "pilot_application", created_at: toIso(r.created_at) })

/** The tenants page's rows, one per environment, as tenants with their environments. */
const groupTenants = (rows: ReadonlyArray<TenantEnvironmentRow>) => {
  const tenants = new Map<
    string,
    { id: string; name: string; status: string; created_at: Date; environments: Array<{ name: string; state: string }> }
  >()
  for (const r of rows) {
    const t = tenants.get(r.tenant_id) ?? { id: r.tenant_id, name: r.name, status: r.status, created_at: r.created_at, environments: [] }
    tenants.set(r.tenant_id, t)
    if (r.environment !== null) t.environments.push({ name: r.environment, state: r.state ?? "unknown" })
  }
  return [...tenants.values()]
}

export class Operator extends Effect.Service<Operator>()("Operator", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const quickstarts = yield* Quickstarts
    const platform = yield* PlatformRepo
    const repo = yield* OperatorRepo
    const cells = yield* Cells
    const placements = yield* PlacementsRepo
    const node = yield* ClusterNode
    const shares = yield* Shares
    const config = yield* AppConfig

    /** The runners, and the cells running on the live ones (issue 19): the same answer on any node. */
    const cluster = Effect.gen(function*() {
      const runners = yield* placements.runners(node.expirationSeconds)
      const cells = yield* placements.placements(node.expirationSeconds)
      return {
        runners: runners.map((r) => ({
          address: r.address,
          healthy: r.alive && r.healthy,
          last_heartbeat: toIso(r.last_heartbeat),
          self: r.address === node.address
        })),
        cells: cells.map((c) => ({ ...c, generation: Number(c.generation), started_at: toIso(c.started_at) }))
      }
    }).pipe(dieOnSqlError)

    /**
     * The cell's share of this node (issue 36): its weight and where it comes from (`weights`, the
     * operator's rows), and what it holds, awaits and got of each resource.
     */
    const shareOf = (t: string, e: EnvironmentName, weights: ReadonlyArray<CellWeightRow>): CellShare => {
      const key = cellKey({ tenantId: t, environment: e })
      const resource = (r: Resource) => {
        const stats = shares.of(r).stats()
        const mine = stats.keys.find((k) => k.key === key)
        const served = shares.served(r, key)
        return {
          capacity: stats.capacity,
          in_use: mine?.inUse ?? 0,
          waiting: mine?.waiting ?? 0,
          grants: served.grants,
          waited_seconds: served.waitedMillis / 1000
        }
      }
      return {
        weight: shares.weights.get(key),
        weight_source: weights.some((r) => r.tenant_id === t && r.environment === e)
          ? "operator"
          : config.shares.cellWeights.has(key)
          ? "config"
          : "default",
        resources: { db: resource("db"), steps: resource("steps"), outbound: resource("outbound"), bytes: resource("bytes") }
      }
    }

    /** What the environment's cell holds now, and its share of this node (`weights`: the operator's). */
    const statsOf = (t: string, e: EnvironmentName, weights: ReadonlyArray<CellWeightRow>) =>
      Effect.gen(function*() {
        const env = yield* platform.liveEnvironment(t, e)
        // a cell that is not running holds nothing; asking does not start it (a start bumps its generation)
        const running = yield* cells.sendIfRunning({ tenantId: t, environment: e }, new GetCellStats())
        const stats = Option.getOrElse(running, () => ({ generation: env.cell_generation, running_actors: 0, parked_runs: 0, streams: 0 }))
        return { ...stats, share: shareOf(t, e, weights) }
      })

    /** What the environment's cell holds now, and its share of this node. 404 for an unknown environment. */
    const cellStats = (t: string, e: EnvironmentName) => Effect.flatMap(repo.cellWeights, (weights) => statsOf(t, e, weights))

    /** `cellStats` of each cell (the weights read once); a cell whose environment is gone is left out. */
    const cellsStats = <C extends CellRef>(refs: ReadonlyArray<C>) =>
      Effect.flatMap(repo.cellWeights, (weights) =>
        Effect.map(
          Effect.forEach(refs, (r) => Effect.option(statsOf(r.tenantId, r.environment, weights)), { concurrency: 8 }),
          (all) => all.flatMap((stats, i) => Option.isSome(stats) ? [{ ...refs[i]!, ...stats.value }] : [])
        ))

    /**
     * Sets a cell's weight (null: back to CELL_WEIGHTS or 1): stored for every node (they read it
     * within SHARE_WEIGHTS_REFRESH_SECONDS), applied on this one at once. 404 for an unknown environment.
     */
    const setCellWeight = (t: string, e: EnvironmentName, weight: number | null) =>
      Effect.gen(function*() {
        yield* platform.liveEnvironment(t, e)
        yield* repo.setCellWeight({ tenantId: t, environment: e }, weight, yield* now)
        const rows = yield* repo.cellWeights
        applyWeights(shares.weights, config.shares.cellWeights, rows)
        return shareOf(t, e, rows)
      })

    const submitPilot = (body: { organization_name: string; contact_email: string }) =>
      Effect.gen(function*() {
        const id = yield* makeId("pilot")
        const row = yield* repo.insertPilot({
          id,
          organizationName: body.organization_name,
          contactEmail: body.contact_email,
          at: yield* now
        })
        return toPilot(row)
      })

    const getPilot = (id: string) =>
      Effect.flatMap(repo.pilot(id), (row) => row ? Effect.succeed(toPilot(row)) : Effect.fail(notFound("pilot application", "id")))

    /**
     * Approval creates the tenant and its `sandbox` environment in `provisioning`, provisions the
     * cell's resources (the quickstart), then marks it `ready`. Approving twice answers with the
     * same tenant, and finishes a provisioning that an earlier approval left half done.
     */
    const approvePilot = (id: string) =>
      Effect.gen(function*() {
        const tenantId = yield* sql.withTransaction(Effect.gen(function*() {
          const pilot = yield* repo.lockPilot(id)
          if (!pilot) return yield* notFound("pilot application", "id")
          if (pilot.status === "approved") return pilot.tenant_id!
          if (pilot.status === "rejected") return yield* conflict("already_decided", "This application was rejected")
          const at = yield* now
          const tenantId = yield* makeId("ten")
          yield* repo.createTenant({ pilotId: id, tenantId, environmentId: yield* makeId("env"), name: pilot.organization_name, at })
          return tenantId
        }))
        yield* auditAbout({ tenantId, environment: "sandbox" })
        // Provisioning of the sandbox cell. An environment already gone (a deleted tenant approved
        // again) has nothing left to provision.
        yield* quickstarts.ensure(tenantId, "sandbox").pipe(Effect.catchTag("NotFound", () => Effect.void))
        yield* repo.markReady({ tenantId, environment: "sandbox" }, yield* now)
        return { id, status: "approved" as const, tenant_id: tenantId, environment: "sandbox" as const }
      })

    /**
     * A submitted application rejected with a reason, by `by` (an operator account's id, or
     * `operator` for the shared token). 409 once it is decided.
     */
    const rejectPilot = (id: string, reason: string, by: string) =>
      Effect.gen(function*() {
        if (reason.trim().length === 0) return yield* invalid("reason_required", "Give the reason of a rejection", "reason")
        if (!(yield* repo.rejectPilot({ id, reason: reason.trim(), by, at: yield* now }))) {
          const pilot = yield* repo.pilot(id)
          if (!pilot) return yield* notFound("pilot application", "id")
          return yield* conflict("already_decided", `This application was ${pilot.status} already`)
        }
      })

    /**
     * A console-made key: without scopes the first key (quickstart abilities), acting as the
     * quickstart's service actor (the quickstart is made first if the environment has none yet);
     * else exactly those scopes.
     */
    const createKey = (
      tenantId: string,
      environment: EnvironmentName,
      body: { name: string; scopes?: ReadonlyArray<string> | undefined }
    ) =>
      Effect.gen(function*() {
        const unknown = (body.scopes ?? []).filter((s) => !isScope(s))
        if (unknown.length > 0) {
          return yield* invalid("unknown_scope", `Unknown scope(s): ${unknown.join(", ")}`, "scopes")
        }
        const state = yield* repo.environmentState({ tenantId, environment })
        if (state === undefined || state === "deleted" || state === "deleting") return yield* notFound("environment", "environment")
        const scopes: ReadonlyArray<Scope> = body.scopes ? [...new Set(body.scopes as ReadonlyArray<Scope>)] : QUICKSTART_SCOPES
        const serviceActorId = body.scopes ? null : (yield* quickstarts.ensure(tenantId, environment)).service_actor_id
        const secret = KeySecrets.generate(environment)
        const row = yield* platform.insertApiKey({
          id: yield* makeId("key"),
          cell: { tenantId, environment },
          name: body.name,
          kind: body.scopes ? "console" : "quickstart",
          prefix: KeySecrets.prefixOf(secret),
          secretHash: KeySecrets.hash(secret),
          scopes,
          serviceActorId,
          at: yield* now
        })
        return { ...Rows.toApiKey(row), secret } satisfies CreatedApiKey
      })

    return {
      cluster,
      submitPilot: (body: Parameters<typeof submitPilot>[0]) => dieOnSqlError(submitPilot(body)),
      getPilot: (id: string) => dieOnSqlError(getPilot(id)),
      approvePilot: (id: string) => dieOnSqlError(approvePilot(id)),
      /** Approval by an operator account: the same approval, which then names who decided and why. */
      approvePilotBy: (id: string, by: string, reason: string | null) =>
        dieOnSqlError(Effect.tap(approvePilot(id), () => repo.approvedBy({ id, by, reason }))),
      rejectPilot: (id: string, reason: string, by: string) => dieOnSqlError(rejectPilot(id, reason, by)),
      /** The applications of a status (null: all), oldest first (at most `limit`), and each status's count. */
      pilotQueue: (status: PilotRow["status"] | null, limit = 100) => dieOnSqlError(repo.pilots(status, limit)),
      createKey: (t: string, e: EnvironmentName, body: Parameters<typeof createKey>[2]) => dieOnSqlError(createKey(t, e, body)),
      /** The environment's quickstart ids (made now for an environment provisioned before quickstarts). */
      getQuickstart: (t: string, e: EnvironmentName) => quickstarts.ensure(t, e),
      cellStats: (t: string, e: EnvironmentName) => dieOnSqlError(cellStats(t, e)),
      cellsStats: <C extends CellRef>(refs: ReadonlyArray<C>) => dieOnSqlError(cellsStats(refs)),
      setCellWeight: (t: string, e: EnvironmentName, weight: number | null) => dieOnSqlError(setCellWeight(t, e, weight)),
      /** Tenants, newest first (at most `limit`), each with its environments and their states (issue 39). */
      tenants: (limit = 200) => dieOnSqlError(Effect.map(repo.tenants(limit), groupTenants)),
      /** One tenant and its environments; 404 for none. */
      tenant: (tenantId: string) =>
        dieOnSqlError(Effect.flatMap(
          repo.tenants(1, tenantId),
          (rows) => rows.length === 0 ? Effect.fail(notFound("tenant", "tenant_id")) : Effect.succeed(groupTenants(rows)[0]!)
        )),
      /** The environment's keys (newest first, the first `limit`): prefix, scopes, status; never a secret (none is kept). */
      keys: (t: string, e: EnvironmentName, limit = 100) =>
        dieOnSqlError(Effect.gen(function*() {
          const at = yield* now
          return (yield* platform.apiKeys(t, e, undefined, limit)).slice(0, limit).map((r) => Rows.toApiKey(r, at))
        })),
      /** The environment's latest runs, with their state and its reason (each one's whole read: getRun). */
      recentRuns: (t: string, e: EnvironmentName, limit = 20) => dieOnSqlError(repo.recentRuns({ tenantId: t, environment: e }, limit)),
      /**
       * Any run of a cell, for support (D19): deleted environments' runs too, until their purge.
       * 404 for a run of another cell or none.
       */
      getRun: (t: string, e: EnvironmentName, runId: string) =>
        Effect.flatMap(RunStore, (store) =>
          Effect.flatMap(
            store.runOfCell(t, e, runId),
            Option.match({ onNone: () => Effect.fail(notFound("run", "run_id")), onSome: (row) => Effect.succeed(toRun(row)) })
          )).pipe(dieOnSqlError)
    } as const
  }),
  dependencies: [Quickstarts.Default, PlatformRepo.Default, OperatorRepo.Default, PlacementsRepo.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Operator (scripts/layers.ts) ----
export { Quickstarts } from "./Operator/Quickstart.js"
export { OperatorRepo } from "./Operator/Repo.js"
export { OperatorToken } from "./Operator/Token.js"
