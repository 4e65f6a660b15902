/**
 * Exactly once per scheduled time across processes and kill -9 (D15). Three every-second schedules
 * (`* * * * * *`) on one database, the service as real child processes (as in test/Recovery.test.ts):
 *   1. processes A and B run side by side for 4 s as a cluster of two (both fire: each claims due
 *      schedules the other has not locked; the environment's one cell, on one of them, runs them);
 *   2. both are killed with SIGKILL, mid-run (each run's scripted model sleeps 1.2 s);
 *   3. process C starts on the same database and runs 3 s.
 * Then, per schedule: each scheduled time started one run (the firings' key) and every run has its
 * firing; the scheduled times are consecutive seconds except for one gap, the downtime, after which
 * only the latest missed second ran; every run ends `succeeded`, those cut short by the kill too
 * (recovery starts them).
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { OPERATOR_TOKEN } from "./support/App.js"
import { childDatabase } from "./support/Database.js"
import { RUN_SCOPES, TERMINAL } from "./support/Sandboxes.js"
import { callChild, type ChildServer, killAllChildren, startChild } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"

afterEach(killAllChildren)

/** A request to a child: the answer's JSON, or a failure naming it. */
const call = (base: string, method: string, path: string, token: string, body?: unknown) =>
  Effect.map(callChild(base, method, path, token, body), (res) => {
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`)
    return res.json
  })

describe("schedules across processes and kill -9", () => {
  it.live(
    "every second: two processes fire each time once; after kill -9 and a restart only the latest missed time runs; every run ends",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const { db, sql } = yield* childDatabase
        const start = () => startChild(db.url, { OPERATOR_TOKEN })
        const t0 = Date.now()
        const [a, b] = yield* Effect.promise(() => Promise.all([start(), start()]))

        // both runners known to both before the cell exists: a runner that joins later takes shards
        // over, and the cell would move (a second generation) while they fire side by side
        for (const node of [a, b]) {
          for (let i = 0; i < 100; i++) {
            const view = yield* call(node.baseUrl, "GET", "/operator/v1/cluster", OPERATOR_TOKEN)
            if (view.runners.filter((r: { healthy: boolean }) => r.healthy).length >= 2) break
            yield* realSleep(100)
          }
        }

        // ---- the customer's setup, over HTTP --------------------------------------------------------
        const op = (method: string, path: string, body?: unknown) => call(a.baseUrl, method, `/operator/v1${path}`, OPERATOR_TOKEN, body)
        const pilot = yield* op("POST", "/pilot-applications", { organization_name: "Cron Co", contact_email: "ops@cron.test" })
        const { tenant_id } = yield* op("POST", `/pilot-applications/${pilot.id}/approve`)
        const key = yield* op("POST", `/tenants/${tenant_id}/environments/sandbox/api-keys`, {
          name: "cron",
          scopes: [...RUN_SCOPES, "schedules:read", "schedules:write"]
        })
        yield* op("PATCH", `/tenants/${tenant_id}/environments/sandbox/settings`, { schedule_min_interval_seconds: 1 })
        const P = `/v1/tenants/${tenant_id}/environments/sandbox`
        const post = (base: string, path: string, body: unknown) =>
          Effect.map(call(base, "POST", `${P}${path}`, key.secret, body), (r) => r.data)
        const ws = yield* post(a.baseUrl, "/workspaces", { name: "w" })
        const mp = yield* post(a.baseUrl, "/model-profiles", {
          name: "s",
          provider: "scripted",
          model: "scripted-1",
          settings: { steps: [{ type: "sleep", seconds: 1.2 }, { type: "text", text: "done {{input}}" }] }
        })
        const agent = yield* post(a.baseUrl, "/agents", { workspace_id: ws.id, name: "a" })
        const rev = yield* post(a.baseUrl, `/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: [] })
        const schedules: Array<{ id: string }> = []
        for (const text of ["one", "two", "three"]) {
          schedules.push(
            yield* post(a.baseUrl, "/schedules", {
              workspace_id: ws.id,
              agent_revision_id: rev.id,
              cron: "* * * * * *",
              input: [{ type: "text", text }]
            })
          )
        }

        // ---- A and B side by side, then both killed ------------------------------------------------------
        const together = Date.now()
        yield* realSleep(4000)
        const killedAt = Date.now()
        yield* Effect.promise(() => Promise.all([a.kill9(), b.kill9()]))
        const openAtKill = (yield* Effect.orDie(sql<{ id: string }>`
          SELECT id FROM runs WHERE workspace_id = ${ws.id} AND status NOT IN ${sql.in(TERMINAL)}`)).map((r) => r.id)
        /** Runs started per cell generation (each process restores the cell with a new one). */
        const startedBy = Effect.orDie(sql<{ generation: number; n: number }>`
          SELECT (data->>'cell_generation')::int AS generation, count(*)::int AS n FROM run_events
          WHERE type = 'run.started' AND run_id IN (SELECT id FROM runs WHERE workspace_id = ${ws.id}) GROUP BY 1 ORDER BY 1`)

        // ---- C on the same database --------------------------------------------------------------------
        const generationsBefore = yield* startedBy
        const restartedAt = Date.now()
        const c: ChildServer = yield* Effect.promise(start)
        const restartMs = Date.now() - restartedAt
        yield* realSleep(3000)
        for (const schedule of schedules) {
          yield* call(c.baseUrl, "PATCH", `${P}/schedules/${schedule.id}`, key.secret, { enabled: false })
        }
        const statuses = Effect.orDie(sql<{ id: string; status: string }>`SELECT id, status FROM runs WHERE workspace_id = ${ws.id}`)
        let runs = yield* statuses
        for (let i = 0; i < 150 && !runs.every((r) => TERMINAL.includes(r.status)); i++) {
          yield* realSleep(100)
          runs = yield* statuses
        }
        const firings = yield* Effect.orDie(sql<{ schedule_id: string; scheduled_at: Date; run_id: string }>`
          SELECT schedule_id, scheduled_at, run_id FROM schedule_firings ORDER BY schedule_id, scheduled_at`)
        console.log(
          `schedules-crash: firings=${firings.length} open_at_kill=${openAtKill.length} ` +
            `started_by_generation_before_kill=${JSON.stringify(generationsBefore)} ` +
            `start_ms=${together - t0} restart_ms=${restartMs}`
        )

        // each scheduled time one run, each run its scheduled time
        expect(new Set(firings.map((f) => f.run_id)).size).toBe(firings.length)
        expect(runs.map((r) => r.id).sort()).toEqual(firings.map((f) => f.run_id).sort())
        // A and B fired side by side, and every run went to the one cell of the environment, on
        // whichever of the two owned it (issue 19): one generation started them all
        expect(generationsBefore.length).toBe(1)
        for (const schedule of schedules) {
          const times = firings.filter((f) => f.schedule_id === schedule.id).map((f) => f.scheduled_at.getTime())
          const gaps = times.slice(1).map((t, i) => [times[i]!, t] as const).filter(([before, after]) => after - before !== 1000)
          // consecutive seconds, but for the downtime, after which only the latest missed second ran
          expect(gaps, `gaps in ${times.map((t) => new Date(t).toISOString()).join(", ")}`).toHaveLength(1)
          const [lastBefore, firstAfter] = gaps[0]!
          expect(lastBefore).toBeLessThanOrEqual(killedAt)
          expect(firstAfter).toBeGreaterThanOrEqual(restartedAt - 1000)
          expect(times.filter((t) => t >= together && t <= killedAt - 1000).length).toBeGreaterThanOrEqual(3)
          expect(times.filter((t) => t > firstAfter).length).toBeGreaterThanOrEqual(2)
        }
        // every run ended, those the kill cut short too
        expect(openAtKill.length).toBeGreaterThanOrEqual(1)
        expect(runs.filter((r) => r.status !== "succeeded"), c.output().slice(-2000)).toEqual([])
        yield* Effect.promise(() => c.kill9())
      })),
    90_000
  )
})
