/**
 * The operator plane (D1): pilot applications, sandbox provisioning (with its quickstart) and
 * console-made keys.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { dieOnSqlError } from "./Database/Defects.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { type EnvironmentName, makeId, toIso } from "./Kernel/Ids.js"
import type { PilotApplication } from "./Domain/Operator.js"
import type { CreatedApiKey } from "./Domain/Platform.js"
import { isScope, QUICKSTART_SCOPES, type Scope } from "./Kernel/Scopes.js"
import { Quickstarts } from "./Operator/Quickstart.js"
import { Cells } from "./Cells/Cells.js"
import { GetCellStats } from "./Cells/Protocol.js"
import * as KeySecrets from "./Platform/KeySecrets.js"
import * as Repo from "./Platform/Repo.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

interface PilotRow {
  id: string
  organization_name: string
  contact_email: string
  status: PilotApplication["status"]
  tenant_id: string | null
  created_at: Date
}
const toPilot = (r: PilotRow): PilotApplication => ({ ...r, object: "pilot_application", created_at: toIso(r.created_at) })

export class Operator extends Effect.Service<Operator>()("Operator", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const quickstarts = yield* Quickstarts
    const platform = yield* Repo.PlatformRepo
    const cells = yield* Cells

    /** What the environment's cell holds now. 404 for an unknown environment. */
    const cellStats = (t: string, e: EnvironmentName) =>
      Effect.gen(function*() {
        const env = yield* platform.liveEnvironment(t, e)
        // a cell that is not running holds nothing; asking does not start it (a start bumps its generation)
        const running = yield* cells.sendIfRunning({ tenantId: t, environment: e }, new GetCellStats())
        return Option.getOrElse(running, () => ({ generation: env.cell_generation, running_actors: 0, parked_runs: 0, streams: 0 }))
      })

    const submitPilot = (body: { organization_name: string; contact_email: string }) =>
      Effect.gen(function*() {
        const id = yield* makeId("pilot")
        const [row] = yield* sql<PilotRow>`
          INSERT INTO pilot_applications (id, organization_name, contact_email, status, created_at)
          VALUES (${id}, ${body.organization_name}, ${body.contact_email}, 'submitted', ${yield* now}) RETURNING *`
        return toPilot(row!)
      })

    const getPilot = (id: string) =>
      Effect.flatMap(sql<PilotRow>`SELECT * FROM pilot_applications WHERE id = ${id}`, ([row]) =>
        row ? Effect.succeed(toPilot(row)) : Effect.fail(notFound("pilot application", "id")))

    /**
     * Approval creates the tenant and its `sandbox` environment in `provisioning`, provisions the
     * cell's resources (the quickstart), then marks it `ready`. Approving twice answers with the
     * same tenant, and finishes a provisioning that an earlier approval left half done.
     */
    const approvePilot = (id: string) =>
      Effect.gen(function*() {
        const tenantId = yield* sql.withTransaction(Effect.gen(function*() {
          const [pilot] = yield* sql<PilotRow>`SELECT * FROM pilot_applications WHERE id = ${id} FOR UPDATE`
          if (!pilot) return yield* notFound("pilot application", "id")
          if (pilot.status === "approved") return pilot.tenant_id!
          if (pilot.status === "rejected") return yield* conflict("already_decided", "This application was rejected")
          const at = yield* now
          const tenantId = yield* makeId("ten")
          yield* sql`INSERT INTO tenants (id, name, status, created_at, updated_at)
                     VALUES (${tenantId}, ${pilot.organization_name}, 'active', ${at}, ${at})`
          yield* sql`INSERT INTO environments (tenant_id, name, id, state, created_at, updated_at)
                     VALUES (${tenantId}, 'sandbox', ${yield* makeId("env")}, 'provisioning', ${at}, ${at})`
          yield* sql`UPDATE pilot_applications SET status = 'approved', tenant_id = ${tenantId}, decided_at = ${at}
                     WHERE id = ${id}`
          return tenantId
        }))
        // Provisioning of the sandbox cell. An environment already gone (a deleted tenant approved
        // again) has nothing left to provision.
        yield* quickstarts.ensure(tenantId, "sandbox").pipe(Effect.catchTag("NotFound", () => Effect.void))
        yield* sql`UPDATE environments SET state = 'ready', updated_at = ${yield* now}
                   WHERE tenant_id = ${tenantId} AND name = 'sandbox' AND state = 'provisioning'`
        return { id, status: "approved" as const, tenant_id: tenantId, environment: "sandbox" as const }
      })

    /**
     * A console-made key: without scopes the first key (quickstart abilities), acting as the
     * quickstart's service actor (the quickstart is made first if the environment has none yet);
     * else exactly those scopes.
     */
    const createKey = (tenantId: string, environment: EnvironmentName, body: { name: string; scopes?: ReadonlyArray<string> | undefined }) =>
      Effect.gen(function*() {
        const unknown = (body.scopes ?? []).filter((s) => !isScope(s))
        if (unknown.length > 0) {
          return yield* invalid("unknown_scope", `Unknown scope(s): ${unknown.join(", ")}`, "scopes")
        }
        const [env] = yield* sql<{ state: string }>`
          SELECT e.state FROM environments e JOIN tenants t ON t.id = e.tenant_id
          WHERE e.tenant_id = ${tenantId} AND e.name = ${environment} AND t.status = 'active'`
        if (!env || env.state === "deleted" || env.state === "deleting") return yield* notFound("environment", "environment")
        const scopes: ReadonlyArray<Scope> = body.scopes ? [...new Set(body.scopes as ReadonlyArray<Scope>)] : QUICKSTART_SCOPES
        const serviceActorId = body.scopes ? null : (yield* quickstarts.ensure(tenantId, environment)).service_actor_id
        const secret = KeySecrets.generate(environment)
        const id = yield* makeId("key")
        const [row] = yield* sql<Repo.ApiKeyRow>`
          INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, service_actor_id, created_at)
          VALUES (${id}, ${tenantId}, ${environment}, ${body.name}, ${body.scopes ? "console" : "quickstart"},
                  ${KeySecrets.prefixOf(secret)}, ${KeySecrets.hash(secret)}, ${scopes as Array<string>}::text[],
                  ${serviceActorId}, ${yield* now})
          RETURNING ${sql.literal(Repo.API_KEY_COLUMNS)}`
        return { ...Repo.toApiKey(row!), secret } satisfies CreatedApiKey
      })

    return {
      submitPilot: (body: Parameters<typeof submitPilot>[0]) => dieOnSqlError(submitPilot(body)),
      getPilot: (id: string) => dieOnSqlError(getPilot(id)),
      approvePilot: (id: string) => dieOnSqlError(approvePilot(id)),
      createKey: (t: string, e: EnvironmentName, body: Parameters<typeof createKey>[2]) => dieOnSqlError(createKey(t, e, body)),
      /** The environment's quickstart ids (made now for an environment provisioned before quickstarts). */
      getQuickstart: (t: string, e: EnvironmentName) => quickstarts.ensure(t, e),
      cellStats: (t: string, e: EnvironmentName) => dieOnSqlError(cellStats(t, e))
    } as const
  }),
  dependencies: [Quickstarts.Default, Repo.PlatformRepo.Default]
}) {}
