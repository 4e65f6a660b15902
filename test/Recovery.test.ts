/**
 * Crash recovery (issue 4 item 8): the service runs as a child process and is killed with SIGKILL
 * at three points (right after admissions; while runs are inside their model call; at a moment
 * when runs are queued, running and finished). After each restart on the same database, every
 * admitted run is still there and ends, running runs continue from their last committed step, a
 * run whose admitted content went missing ends `interrupted`, and no event is lost or duplicated.
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { freshDatabase, OPERATOR_TOKEN } from "./support/App.js"
import { type ChildServer, startChild } from "./support/Server.js"

const running = new Set<ChildServer>()
afterEach(async () => {
  for (const s of running) await s.kill9()
  running.clear()
})

const call = async (base: string, method: string, path: string, token: string, body?: unknown) => {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...(method !== "GET" && path.startsWith("/v1/") ? { "idempotency-key": randomUUID() } : {})
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  const json: any = await res.json().catch(() => undefined)
  return { status: res.status, json }
}

const TERMINAL = ["succeeded", "failed", "cancelled", "expired", "interrupted", "outcome_unknown"]
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe("crash recovery", () => {
  it.scoped("kill -9 at three points: nothing admitted is lost, nothing is duplicated, every run ends", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const sql = Context.get(yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url) }).pipe(Layer.orDie)), SqlClient.SqlClient)
      const env = { OPERATOR_TOKEN, CELL_MAX_ACTIVE_RUNS: "2" }
      const start = () =>
        Effect.promise(async () => {
          const s = await startChild(db.url, env)
          running.add(s)
          return s
        })
      const kill = (s: ChildServer) =>
        Effect.promise(async () => {
          await s.kill9()
          running.delete(s)
        })

      let server = yield* start()
      const setup = yield* Effect.promise(async () => {
        const base = server.baseUrl
        const pilot = await call(base, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
          organization_name: "Crash Co",
          contact_email: "ops@crash.test"
        })
        const approved = await call(base, "POST", `/operator/v1/pilot-applications/${pilot.json.id}/approve`, OPERATOR_TOKEN)
        const tenantId: string = approved.json.tenant_id
        const key = await call(base, "POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
          name: "crash",
          scopes: ["agents:read", "agents:write", "conversations:read", "conversations:write", "runs:read", "runs:write"]
        })
        const P = `/v1/tenants/${tenantId}/environments/sandbox`
        const secret: string = key.json.secret
        const ws = await call(base, "POST", `${P}/workspaces`, secret, { name: "w" })
        const mp = await call(base, "POST", `${P}/model-profiles`, secret, {
          name: "s",
          provider: "scripted",
          model: "scripted-1",
          settings: { steps: [{ type: "sleep", seconds: 1.5 }, { type: "text", text: "done {{input}}" }] }
        })
        const agent = await call(base, "POST", `${P}/agents`, secret, { workspace_id: ws.json.data.id, name: "a" })
        const rev = await call(base, "POST", `${P}/agents/${agent.json.data.id}/revisions`, secret, {
          model_profile_id: mp.json.data.id,
          instructions: "",
          tool_ids: []
        })
        return { tenantId, P, secret, workspaceId: ws.json.data.id as string, revisionId: rev.json.data.id as string }
      })
      const admitted: Array<string> = []
      /** Admits `n` runs, each in a new conversation; returns their ids (202 received). */
      const admit = (n: number, label: string) =>
        Effect.promise(async () => {
          const ids: Array<string> = []
          for (let i = 0; i < n; i++) {
            const conv = await call(server.baseUrl, "POST", `${setup.P}/conversations`, setup.secret, {
              workspace_id: setup.workspaceId,
              agent_revision_id: setup.revisionId
            })
            const run = await call(server.baseUrl, "POST", `${setup.P}/conversations/${conv.json.data.id}/runs`, setup.secret, {
              input: [{ type: "text", text: `${label}-${i}` }]
            })
            expect(run.status).toBe(202)
            ids.push(run.json.data.id)
          }
          admitted.push(...ids)
          return ids
        })
      // Polled from the database (polling over HTTP would spend the cell's rate limit).
      const statusOf = (id: string) =>
        Effect.map(Effect.orDie(sql<{ status: string }>`SELECT status FROM runs WHERE id = ${id}`), (r) => r[0]?.status ?? "missing")
      const generation = Effect.map(
        Effect.orDie(sql<{ g: number }>`SELECT cell_generation AS g FROM environments WHERE tenant_id = ${setup.tenantId}`),
        (rows) => rows[0]!.g
      )

      // Kill point 1: right after six admissions (queued, at most two started).
      yield* admit(6, "k1")
      yield* kill(server)
      const gen1 = yield* generation
      server = yield* start()

      // Kill point 2: inside the model call (the scripted 1.5 s sleep) of the running runs.
      const second = yield* admit(6, "k2")
      for (let i = 0; i < 100; i++) {
        const statuses = yield* Effect.forEach(second, statusOf)
        if (statuses.filter((s) => s === "running").length >= 2) break
        yield* Effect.promise(() => sleep(100))
      }
      yield* Effect.promise(() => sleep(700))
      yield* kill(server)
      // While the service is down, one unfinished run loses its admitted content.
      const [victim] = yield* Effect.orDie(sql<{ id: string }>`
        SELECT id FROM runs WHERE status IN ('queued', 'running') AND id IN ${sql.in(second)} ORDER BY id LIMIT 1`)
      expect(victim).toBeDefined()
      yield* Effect.orDie(sql`UPDATE runs SET input = NULL WHERE id = ${victim!.id}`)
      server = yield* start()
      const gen2 = yield* generation
      expect(gen2).toBeGreaterThan(gen1)

      // Kill point 3: a mix of queued, running and finished runs.
      yield* admit(6, "k3")
      yield* Effect.promise(() => sleep(2200))
      yield* kill(server)
      server = yield* start()

      // Every admitted run ends.
      let statuses: Array<string> = []
      for (let i = 0; i < 300; i++) {
        statuses = yield* Effect.forEach(admitted, statusOf)
        if (statuses.every((s) => TERMINAL.includes(s))) break
        yield* Effect.promise(() => sleep(100))
      }
      expect(yield* generation).toBeGreaterThan(gen2)

      const rows = yield* Effect.orDie(sql<{ id: string; status: string; status_reason: string | null }>`
        SELECT id, status, status_reason FROM runs WHERE id IN ${sql.in(admitted)}`)
      const lost = admitted.length - rows.length
      const events = yield* Effect.orDie(sql<{ run_id: string; sequence: number; id: string; type: string }>`
        SELECT run_id, sequence, id, type FROM run_events WHERE run_id IN ${sql.in(admitted)} ORDER BY run_id, sequence`)
      let duplicated = 0
      let gaps = 0
      for (const id of admitted) {
        const mine = events.filter((e) => e.run_id === id)
        mine.forEach((e, i) => {
          if (e.sequence !== i + 1) gaps++
        })
        const types = mine.map((e) => e.type)
        duplicated += types.length - new Set(types).size
        const run = rows.find((r) => r.id === id)!
        if (id === victim!.id) {
          expect(run).toMatchObject({ status: "interrupted", status_reason: "admitted_content_missing" })
          expect(types.at(-1)).toBe("run.interrupted")
        } else {
          expect(run.status, `${id}: ${types.join(",")}`).toBe("succeeded")
          expect(types).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
        }
      }
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length)
      const interrupted = rows.filter((r) => r.status === "interrupted").length
      console.log(`crash-recovery: runs=${admitted.length} kill_points=3 lost=${lost} duplicated=${duplicated} gaps=${gaps} interrupted=${interrupted}`)
      expect({ lost, duplicated, gaps, interrupted }).toEqual({ lost: 0, duplicated: 0, gaps: 0, interrupted: 1 })
      // The resumed runs' output is the answer to their own input.
      const outputs = yield* Effect.orDie(sql<{ input: any; output: any }>`
        SELECT input, output FROM runs WHERE id IN ${sql.in(admitted)} AND status = 'succeeded'`)
      for (const o of outputs) expect(o.output[0].text).toBe(`done ${o.input[0].text}`)
      yield* kill(server)
    }), 180_000)
})
