/**
 * Crash recovery (issue 4 item 8): the service runs as a child process (`node --import tsx
 * src/main.ts` on DATABASE_URL) and is killed with SIGKILL, process group and all, at three points:
 *   1. right after six admissions (the last 202);
 *   2. while runs are inside their model call (the scripted 1.5 s sleep);
 *   3. at a moment when runs are queued, running and finished.
 * While it is down after point 2, one unfinished run loses its admitted content (`input = NULL`).
 * After each restart on the same database the cell is restored (a new `cell_generation`), every
 * admitted run is still there and ends: queued runs start, a run that was executing continues from
 * its last committed step (no second `run.started`, its earlier events untouched), the run without
 * its content ends `interrupted` (`admitted_content_missing`), and no event is lost or duplicated.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { OPERATOR_TOKEN } from "./support/App.js"
import { freshDatabase } from "./support/Database.js"
import { RUN_SCOPES, TERMINAL } from "./support/Sandboxes.js"
import { callChild as call, type ChildServer, killAllChildren, startChild } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"

afterEach(killAllChildren)

const SUCCEEDED_EVENTS = ["run.queued", "run.started", "run.message", "run.succeeded"]

const expectStatus = (res: { status: number; text: string }, status: number, what: string) => {
  if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${res.text}`)
}

interface EventRow {
  run_id: string
  sequence: number
  id: string
  type: string
  data: any
  created_at: Date
}

/** What the database held right after a kill: each run's status and events. */
interface Snapshot {
  readonly point: number
  readonly killedAt: number
  /** The cell generation of the process that was killed. */
  readonly generation: number
  readonly status: Map<string, string>
  readonly events: Map<string, Array<EventRow>>
}

describe("crash recovery", () => {
  it.live(
    "kill -9 at three points: nothing admitted is lost, nothing is duplicated, every run ends",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const db = yield* freshDatabase
        // Children die before the database is dropped (finalizers run in reverse order).
        yield* Effect.addFinalizer(() => Effect.promise(killAllChildren))
        const sql = Context.get(
          yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 3 }).pipe(Layer.orDie)),
          SqlClient.SqlClient
        )
        const q = <A extends object>(query: Effect.Effect<ReadonlyArray<A>, unknown>) => Effect.orDie(query)

        const start = () => Effect.promise(() => startChild(db.url, { OPERATOR_TOKEN, CELL_MAX_ACTIVE_RUNS: "2" }))

        // ---- server A: the customer's setup over HTTP ---------------------------------------------
        let server: ChildServer = yield* start()
        const base = () => server.baseUrl
        const pilot = yield* call(base(), "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
          organization_name: "Crash Co",
          contact_email: "ops@crash.test"
        })
        expectStatus(pilot, 201, "pilot application")
        const approved = yield* call(base(), "POST", `/operator/v1/pilot-applications/${pilot.json.id}/approve`, OPERATOR_TOKEN)
        expectStatus(approved, 200, "approve")
        const tenantId: string = approved.json.tenant_id
        const key = yield* call(base(), "POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
          name: "crash",
          scopes: RUN_SCOPES
        })
        expectStatus(key, 201, "api key")
        const P = `/v1/tenants/${tenantId}/environments/sandbox`
        const secret: string = key.json.secret
        const post = (path: string, body: unknown, what: string, status = 201) =>
          Effect.map(call(base(), "POST", `${P}${path}`, secret, body), (r) => {
            expectStatus(r, status, what)
            return r.json.data
          })
        const ws = yield* post("/workspaces", { name: "w" }, "workspace")
        const mp = yield* post("/model-profiles", {
          name: "s",
          provider: "scripted",
          model: "scripted-1",
          settings: { steps: [{ type: "sleep", seconds: 1.5 }, { type: "text", text: "done {{input}}" }] }
        }, "model profile")
        const agent = yield* post("/agents", { workspace_id: ws.id, name: "a" }, "agent")
        const rev = yield* post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: [] }, "revision")

        const generation = Effect.map(
          q(sql<{ g: number }>`SELECT cell_generation AS g FROM environments WHERE tenant_id = ${tenantId} AND name = 'sandbox'`),
          (rows) => rows[0]!.g
        )
        /** The generation of each process's cell, A first. */
        const generations: Array<number> = [yield* generation]
        expect(generations[0]).toBeGreaterThan(0)
        /** After a restart: recovery restores the cell (in the background), so its generation goes up. */
        const restoredGeneration = Effect.gen(function*() {
          const previous = generations.at(-1)!
          let g = yield* generation
          for (let i = 0; i < 150 && g <= previous; i++) {
            yield* realSleep(100)
            g = yield* generation
          }
          expect(g, `cell_generation after restart ${generations.length}`).toBeGreaterThan(previous)
          generations.push(g)
        })

        const admitted: Array<string> = []
        /** Admits `n` runs, each in a new conversation; returns their ids (each got a 202). */
        const admit = (n: number, label: string) =>
          Effect.gen(function*() {
            const ids: Array<string> = []
            for (let i = 0; i < n; i++) {
              const conv = yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }, "conversation")
              const run = yield* post(`/conversations/${conv.id}/runs`, { input: [{ type: "text", text: `${label}-${i}` }] }, "run", 202)
              ids.push(run.id)
              admitted.push(run.id)
            }
            return ids
          })

        const eventsOf = (ids: ReadonlyArray<string>) =>
          Effect.map(
            q(sql<EventRow>`
            SELECT run_id, sequence, id, type, data, created_at FROM run_events
            WHERE run_id IN ${sql.in(ids)} ORDER BY run_id, sequence`),
            (rows) => {
              const byRun = new Map<string, Array<EventRow>>(ids.map((id) => [id, []]))
              for (const r of rows) byRun.get(r.run_id)?.push(r)
              return byRun
            }
          )
        const statusesOf = (ids: ReadonlyArray<string>) =>
          Effect.map(
            q(sql<{ id: string; status: string }>`SELECT id, status FROM runs WHERE id IN ${sql.in(ids)}`),
            (rows) => new Map(rows.map((r) => [r.id, r.status]))
          )

        const snapshots: Array<Snapshot> = []
        /** kill -9 of the whole process group, then what the database holds at that moment. */
        const killPoint = (point: number) =>
          Effect.gen(function*() {
            const killedAt = Date.now()
            yield* Effect.promise(() => server.kill9())
            const snapshot: Snapshot = {
              point,
              killedAt,
              generation: generations.at(-1)!,
              status: yield* statusesOf(admitted),
              events: yield* eventsOf(admitted)
            }
            snapshots.push(snapshot)
            return snapshot
          })

        // ---- kill point 1: right after the last 202 ------------------------------------------------
        yield* admit(6, "k1")
        yield* killPoint(1)

        // ---- server B; kill point 2: inside the model call of the running runs ----------------------
        server = yield* start()
        yield* restoredGeneration
        const second = yield* admit(6, "k2")
        // Polled from the database: polling over HTTP would spend the cell's rate limit.
        let runningNow = 0
        for (let i = 0; i < 300 && runningNow < 2; i++) {
          const statuses = yield* statusesOf(second)
          runningNow = [...statuses.values()].filter((s) => s === "running").length
          if (runningNow < 2) yield* realSleep(50)
        }
        expect(runningNow, "runs of the second batch running before kill point 2").toBeGreaterThanOrEqual(2)
        yield* realSleep(700) // mid model call (the scripted step sleeps 1.5 s)
        const atKill2 = yield* killPoint(2)
        const runningAtKill2 = admitted.filter((id) => atKill2.status.get(id) === "running")
        expect(runningAtKill2.length, "runs executing at kill point 2").toBeGreaterThanOrEqual(2)

        // While the service is down, one run that was executing loses its admitted content.
        const victim = runningAtKill2[0]!
        yield* q(sql`UPDATE runs SET input = NULL WHERE id = ${victim}`)

        // ---- server C; kill point 3: a mix of queued, running and finished runs ---------------------
        server = yield* start()
        yield* restoredGeneration
        yield* admit(6, "k3")
        yield* realSleep(2200)
        const atKill3 = yield* killPoint(3)

        // ---- server D: every admitted run ends -----------------------------------------------------
        server = yield* start()
        yield* restoredGeneration
        let finalStatus = new Map<string, string>()
        for (let i = 0; i < 400; i++) {
          finalStatus = yield* statusesOf(admitted)
          if (admitted.every((id) => TERMINAL.includes(finalStatus.get(id) ?? ""))) break
          yield* realSleep(100)
        }
        const open = admitted.filter((id) => !TERMINAL.includes(finalStatus.get(id) ?? "missing"))
        expect(open, `runs not terminal 40 s after the last restart:\n${server.output()}`).toEqual([])

        // ---- the books -----------------------------------------------------------------------------
        const rows = yield* q(sql<{ id: string; status: string; status_reason: string | null; input: any; output: any }>`
        SELECT id, status, status_reason, input, output FROM runs WHERE id IN ${sql.in(admitted)}`)
        const byId = new Map(rows.map((r) => [r.id, r]))
        const lost = admitted.filter((id) => !byId.has(id)).length
        const events = yield* eventsOf(admitted)
        const allEvents = [...events.values()].flat()

        // The counts first, so the summary line is printed even when a detailed check below fails.
        let duplicated = 0
        let gaps = 0
        for (const id of admitted) {
          const types = events.get(id)!.map((e) => e.type)
          events.get(id)!.forEach((e, i) => {
            if (e.sequence !== i + 1) gaps++
          })
          for (const type of SUCCEEDED_EVENTS) duplicated += Math.max(0, types.filter((t) => t === type).length - 1)
        }
        const interrupted = rows.filter((r) => r.status === "interrupted").length
        console.log(
          `crash-recovery: runs=${admitted.length} kill_points=${snapshots.length} lost=${lost} duplicated=${duplicated} interrupted=${interrupted}`
        )
        expect({ runs: admitted.length, lost, duplicated, gaps, interrupted }).toEqual({
          runs: 18,
          lost: 0,
          duplicated: 0,
          gaps: 0,
          interrupted: 1
        })

        for (const id of admitted) {
          const mine = events.get(id)!
          const types = mine.map((e) => e.type)
          const trail = `${id}: ${types.join(",")}`
          const run = byId.get(id)
          if (!run) continue
          if (id === victim) {
            expect(run, trail).toMatchObject({ status: "interrupted", status_reason: "admitted_content_missing" })
            expect(types, trail).toEqual(["run.queued", "run.started", "run.interrupted"])
          } else {
            expect(run.status, trail).toBe("succeeded")
            expect(types, trail).toEqual(SUCCEEDED_EVENTS)
            expect(run.output, trail).toEqual([{ type: "text", text: `done ${run.input[0].text}` }])
          }
          // Every run started on a restored cell of one of the four processes.
          const started = mine.find((e) => e.type === "run.started")
          expect(generations, trail).toContain(started?.data.cell_generation)

          for (const snapshot of snapshots) {
            // What was committed before a kill is still there, unchanged: the later events follow it.
            const before = snapshot.events.get(id) ?? []
            expect(mine.slice(0, before.length).map((e) => e.id), `${trail} (kill point ${snapshot.point})`).toEqual(
              before.map((e) => e.id)
            )
            if (snapshot.status.get(id) === "running" && id !== victim) {
              // Executing at the kill: it continued from its last committed step (run.started, by the
              // killed process's cell, or by an earlier one when the killed process had recovered it
              // without committing a step yet), with no second start, and its answer came after the kill.
              expect(before.map((e) => e.type), `${trail} (kill point ${snapshot.point})`).toEqual(["run.queued", "run.started"])
              expect(started!.data.cell_generation, trail).toBeLessThanOrEqual(snapshot.generation)
              const message = mine.find((e) => e.type === "run.message")!
              expect(message.created_at.getTime(), trail).toBeGreaterThan(snapshot.killedAt)
            }
          }
        }
        expect(new Set(allEvents.map((e) => e.id)).size, "event ids are unique").toBe(allEvents.length)

        // The API shows the same runs and events (server D).
        for (const id of admitted) {
          const run = yield* call(base(), "GET", `${P}/runs/${id}`, secret)
          expectStatus(run, 200, `GET run ${id}`)
          expect(run.json.data.status).toBe(byId.get(id)?.status)
          const page = yield* call(base(), "GET", `${P}/runs/${id}/events`, secret)
          expectStatus(page, 200, `GET events ${id}`)
          expect(page.json.next_cursor).toBeNull()
          expect(page.json.items.map((e: any) => [e.sequence, e.id, e.type])).toEqual(
            events.get(id)!.map((e) => [e.sequence, e.id, e.type])
          )
        }

        // Kill point 3 was taken with work in every state (queued or running, and finished).
        const mix = [...atKill3.status.values()]
        expect(mix.some((s) => s === "queued" || s === "running"), `kill point 3: ${mix.join(",")}`).toBe(true)
        expect(mix.some((s) => TERMINAL.includes(s)), `kill point 3: ${mix.join(",")}`).toBe(true)
        expect(generations).toHaveLength(4)
        yield* Effect.promise(() => server.kill9())
      })),
    120_000
  )
})
