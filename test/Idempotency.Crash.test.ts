/**
 * Atomic idempotency across crashes (D5, D19; issue 14 finding 7): the service runs as a child
 * process and is killed with SIGKILL at the two commit boundaries of a mutation.
 *   1. Inside the transaction, after the effect's writes and before its response is stored (the
 *      store is held back by a table lock taken on a connection of the test's own): Postgres rolls
 *      the transaction back and releases the scope's lock, nothing of it remains, and the retry
 *      after the restart executes it, once.
 *   2. Right after the commit (the stored response is seen in the database, the answer may not have
 *      reached the client): the retry after the restart replays it; nothing is done twice.
 * For service actors (a plain create), user deletion (deleteUser was a 410 on a retry) and a run
 * (createRun with `Prefer: wait`, whose run goes on after the 202 is stored; its replay answers what the
 * wait would have: 200 with the run when it ended within the wait, else the 202). Every retry after a
 * restart is answered within 5 s, never 409 for the dead process's request. Run steps' own
 * boundaries are Recovery.test.ts's.
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import { OPERATOR_TOKEN } from "./support/App.js"
import { freshDatabase, pg } from "./support/Database.js"
import { type ChildServer, freePort, killAllChildren, startChild } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"

afterEach(killAllChildren)

interface Answer {
  readonly status: number
  readonly json: any
  readonly text: string
  readonly replayed: string | null
}

const call = (base: string, method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) =>
  fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...(method !== "GET" && path.startsWith("/v1/") && headers["idempotency-key"] === undefined
        ? { "idempotency-key": randomUUID() }
        : {}),
      ...headers
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  }).then(async (res): Promise<Answer> => {
    const text = await res.text()
    let json: any = undefined
    try {
      json = text === "" ? undefined : JSON.parse(text)
    } catch {
      // not JSON
    }
    return { status: res.status, json, text, replayed: res.headers.get("idempotent-replayed") }
  })

const expectStatus = (res: Answer, status: number, what: string) => {
  if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${res.text}`)
  return res.json?.data ?? res.json
}

/** One of the three mutations, sent with a fixed Idempotency-Key. */
interface Mutation {
  readonly name: string
  readonly method: string
  readonly path: string
  readonly body?: unknown
  readonly headers?: Record<string, string>
  /** the status of its first execution (a run's: the 202 stored at admission; the waited answer is a 200) */
  readonly status: number
  /** the status when executed with `Prefer: wait` and the run ended in time */
  readonly waited?: number
  /** rows that show its effect (how many times it happened) */
  readonly effects: string
}

describe("idempotency across kill -9 (D19)", () => {
  it.live(
    "killed inside the transaction: nothing remains, the retry executes once; killed after the commit: the retry replays",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const db = yield* freshDatabase
        yield* Effect.addFinalizer(() => Effect.promise(killAllChildren))
        const client = new pg.Client({ connectionString: db.url })
        yield* Effect.acquireRelease(Effect.promise(() => client.connect()), () => Effect.promise(() => client.end()))
        const one = async (query: string) => Number((await client.query(query)).rows[0]!["n"])

        // The same runner address on every start, as a deployment has (docker-compose's RUNNER_PORT): the
        // restarted node takes its shards back at once instead of waiting out the dead runner's lock
        // expiration (CLUSTER_LOCK_EXPIRATION_SECONDS), which a retry would otherwise wait for.
        const runnerPort = String(yield* Effect.promise(freePort))
        const start = () => startChild(db.url, { OPERATOR_TOKEN, RUNNER_PORT: runnerPort })
        let server: ChildServer = yield* Effect.promise(start)

        // ---- setup: a tenant, a key, users to delete, an agent revision, conversations ---------------
        const setup = yield* Effect.promise(async () => {
          const base = server.baseUrl
          const pilot = expectStatus(
            await call(base, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
              organization_name: "Crash Co",
              contact_email: "ops@crash.test"
            }),
            201,
            "pilot"
          )
          const approved = expectStatus(
            await call(base, "POST", `/operator/v1/pilot-applications/${pilot.id}/approve`, OPERATOR_TOKEN),
            200,
            "approve"
          )
          const tenantId: string = approved.tenant_id
          const key = expectStatus(
            await call(base, "POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
              name: "crash",
              scopes: [
                "service-actors:write",
                "users:write",
                "agents:write",
                "conversations:write",
                "runs:write",
                "runs:read"
              ]
            }),
            201,
            "key"
          )
          const P = `/v1/tenants/${tenantId}/environments/sandbox`
          const post = async (path: string, body: unknown, what: string) =>
            expectStatus(await call(base, "POST", `${P}${path}`, key.secret, body), 201, what)
          const users = [await post("/users", { external_id: "u-1", display_name: "One" }, "user 1")]
          users.push(await post("/users", { external_id: "u-2", display_name: "Two" }, "user 2"))
          const ws = await post("/workspaces", { name: "w" }, "workspace")
          const mp = await post("/model-profiles", {
            name: "s",
            provider: "scripted",
            model: "scripted-1",
            settings: { steps: [{ type: "sleep", seconds: 2 }, { type: "text", text: "done {{input}}" }] }
          }, "profile")
          const agent = await post("/agents", { workspace_id: ws.id, name: "a" }, "agent")
          const rev = await post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: [] }, "revision")
          const convs = [await post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }, "conversation 1")]
          convs.push(await post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }, "conversation 2"))
          return { tenantId, P, secret: key.secret as string, users, convs }
        })
        const { P, secret, tenantId } = setup
        const serviceActors = (name: string) =>
          `SELECT count(*)::int AS n FROM service_actors WHERE tenant_id = '${tenantId}' AND name = '${name}'`
        const mutations = (round: number): ReadonlyArray<Mutation> => [
          {
            name: "createServiceActor",
            method: "POST",
            path: `${P}/service-actors`,
            body: { name: `bot-${round}` },
            status: 201,
            effects: serviceActors(`bot-${round}`)
          },
          {
            name: "deleteUser",
            method: "DELETE",
            path: `${P}/users/${setup.users[round]!.id}`,
            status: 202,
            effects: `SELECT count(*)::int AS n FROM deletion_jobs WHERE resource_id = '${setup.users[round]!.id}'`
          },
          {
            name: "createRun",
            method: "POST",
            path: `${P}/conversations/${setup.convs[round]!.id}/runs`,
            body: { input: [{ type: "text", text: `round ${round}` }] },
            headers: { prefer: "wait=10" },
            status: 202,
            waited: 200,
            effects: `SELECT count(*)::int AS n FROM runs WHERE conversation_id = '${setup.convs[round]!.id}'`
          }
        ]
        const send = (m: Mutation, key: string) =>
          call(server.baseUrl, m.method, m.path, secret, m.body, { ...m.headers, "idempotency-key": key })
        const storedResponses = (keys: ReadonlyArray<string>) =>
          one(`SELECT count(*)::int AS n FROM idempotency_keys WHERE key IN (${keys.map((k) => `'${k}'`).join(",")})`)
        /** After a restart: each retry answered within 5 s, the first as `expected`, a second as its replay. */
        const retryAll = async (ms: ReadonlyArray<Mutation>, keys: ReadonlyArray<string>, expectReplay: boolean) => {
          const answers: Array<{ first: Answer; second: Answer; ms: number }> = []
          for (const [i, m] of ms.entries()) {
            const started = Date.now()
            const first = await send(m, keys[i]!)
            const took = Date.now() - started
            const second = await send(m, keys[i]!)
            answers.push({ first, second, ms: took })
          }
          for (const [i, { first, ms: took, second }] of answers.entries()) {
            const m = ms[i]!
            expect(took, `${m.name}: retry answered in ${took} ms`).toBeLessThan(5_000)
            // a run admitted before the kill: its replay answers what its wait would have (the run
            // recovered and ended within the wait: 200 with it, checked below; else the stored 202)
            if (!(expectReplay && m.waited !== undefined && first.status === m.waited)) {
              expect(first.status, `${m.name}: ${first.text}`).toBe(expectReplay ? m.status : m.waited ?? m.status)
            }
            expect(first.replayed, m.name).toBe(expectReplay ? "true" : null)
            expect(second.replayed, m.name).toBe("true")
            expect(second.json, m.name).toEqual(first.json)
            expect(await one(m.effects), `${m.name}: effects`).toBe(1)
          }
          return answers
        }

        // ---- kill point 1: inside the transactions, each before its response is stored ---------------
        const round0 = mutations(0)
        const keys0 = round0.map((m) => `crash-inside-${m.name}`)
        const blocker = new pg.Client({ connectionString: db.url })
        yield* Effect.promise(async () => {
          await blocker.connect()
          await blocker.query("BEGIN")
          // Reads go on (ACCESS SHARE); the INSERT of a stored response (with its audit entry's) waits.
          await blocker.query("LOCK TABLE idempotency_keys IN SHARE MODE")
        })
        const inFlight = round0.map((m, i) => send(m, keys0[i]!).catch(() => undefined))
        // all three wait on the lock, their effects written
        let waiting = 0
        for (let i = 0; i < 200 && waiting < 3; i++) {
          yield* realSleep(50)
          waiting = yield* Effect.promise(() =>
            one(`SELECT count(*)::int AS n FROM pg_stat_activity
                 WHERE application_name = 'agent-platform' AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO idempotency_keys%'`)
          )
        }
        expect(waiting).toBe(3)
        yield* Effect.promise(() => server.kill9())
        // Postgres ends the dead client's transactions even while they wait (client_connection_check_interval:
        // within a second; up to 15 s allowed, for a machine loaded by other tests).
        let left = 3
        for (let i = 0; i < 300 && left > 0; i++) {
          yield* realSleep(50)
          left = yield* Effect.promise(() =>
            one(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'agent-platform'`)
          )
        }
        if (left > 0) {
          console.log(
            "connections of the killed process left:",
            JSON.stringify(
              yield* Effect.promise(() =>
                client.query(
                  `SELECT state, wait_event_type, wait_event, left(query, 80) AS q, now() - xact_start AS age FROM pg_stat_activity WHERE application_name = 'agent-platform'`
                ).then((r) => r.rows)
              )
            )
          )
        }
        expect(left).toBe(0)
        yield* Effect.promise(async () => {
          await blocker.query("ROLLBACK")
          await blocker.end()
          await Promise.all(inFlight)
        })
        for (const m of round0) expect(yield* Effect.promise(() => one(m.effects)), `${m.name} after the kill`).toBe(0)
        expect(yield* Effect.promise(() => storedResponses(keys0))).toBe(0)

        server = yield* Effect.promise(start)
        const executed = yield* Effect.promise(() => retryAll(round0, keys0, false))
        expect(executed.map((a) => a.first.status)).toEqual([201, 202, 200])

        // ---- kill point 2: right after the commits ---------------------------------------------------
        const round1 = mutations(1)
        const keys1 = round1.map((m) => `crash-after-${m.name}`)
        const pending = round1.map((m, i) => send(m, keys1[i]!).catch(() => undefined))
        let stored = 0
        for (let i = 0; i < 1000 && stored < 3; i++) {
          stored = yield* Effect.promise(() => storedResponses(keys1))
          if (stored < 3) yield* realSleep(2)
        }
        expect(stored).toBe(3)
        yield* Effect.promise(() => server.kill9())
        yield* Effect.promise(() => Promise.all(pending))
        for (const m of round1) expect(yield* Effect.promise(() => one(m.effects)), `${m.name} after the kill`).toBe(1)

        server = yield* Effect.promise(start)
        const replayed = yield* Effect.promise(() => retryAll(round1, keys1, true))
        const run = replayed[2]!.first.json.data
        if (replayed[2]!.first.status === 200) {
          // the replay of a wait that ended in time: the ended run, ended within the 10 s wait of its admission
          expect(run.status).toBe("succeeded")
          expect(Date.parse(run.completed_at) - Date.parse(run.created_at)).toBeLessThanOrEqual(10_000)
        } else {
          expect(replayed[2]!.first.status).toBe(202)
        }
        // the run admitted before the kill is recovered and ends
        let status = ""
        for (let i = 0; i < 200 && !["succeeded", "failed"].includes(status); i++) {
          yield* realSleep(100)
          status = (yield* Effect.promise(() => client.query(`SELECT status FROM runs WHERE id = '${run.id}'`)))
            .rows[0]!["status"] as string
        }
        expect(status).toBe("succeeded")
      })),
    120_000
  )
})
