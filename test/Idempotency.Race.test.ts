/**
 * 1,000 identical mutations racing with one Idempotency-Key (D5, D19; issue 14): exactly one
 * effect. Every answer is either the one result (the first, or its replay with
 * `Idempotent-Replayed: true`) or 409 `idempotency_key_in_use` while the first holds the key; a
 * retry after the race replays the stored answer. For `createRun` (the run, its admission and its
 * stored 202 are one transaction) and for two non-run mutations (`createUser`,
 * `createServiceActor`). Real HTTP, real Postgres; the limits are raised so the race is the
 * idempotency gate's alone.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Agent, fetch } from "undici"

import { defaultEdgeConfig } from "../src/Config/AppConfig.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { provisionSandbox, type Reply } from "./support/Client.js"
import { IDEMPOTENCY_SCOPES } from "./support/Idempotency.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

const UNLIMITED = { ratePerSecond: 100_000, burst: 100_000 }
const RACERS = 1_000

/**
 * Connections the racers share: 200, under the listen backlog (511), so a loaded machine queues
 * them in the client instead of resetting connections; 200 requests are still in flight at once.
 */
const dispatcher = new Agent({ connections: 200 })

/** `n` identical requests at once over real HTTP. */
const race = (path: string, key: string, idempotencyKey: string, body: unknown, n = RACERS) =>
  Effect.flatMap(TestApp, (app) =>
    Effect.promise(() =>
      Promise.all(
        Array.from({ length: n }, async (): Promise<Reply> => {
          const res = await fetch(`${app.baseUrl}${path}`, {
            dispatcher,
            method: "POST",
            headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": idempotencyKey },
            body: JSON.stringify(body)
          })
          const text = await res.text()
          return { status: res.status, headers: res.headers as unknown as Headers, body: JSON.parse(text), text }
        })
      )
    ))

/** A retry after the race: the stored answer, replayed. */
const expectReplay = (answers: ReadonlyArray<Reply>, status: number, id: string) => {
  for (const a of answers) {
    expect(a.status).toBe(status)
    expect(a.headers.get("idempotent-replayed")).toBe("true")
    expect(a.body.data.id).toBe(id)
  }
}

/** The answers of a race: one result (the same id in every success), the rest 409 in use. */
const expectOneResult = (answers: ReadonlyArray<Reply>, status: number) => {
  const successes = answers.filter((a) => a.status === status)
  const inUse = answers.filter((a) => a.status === 409)
  expect(
    successes.length + inUse.length,
    `other answers: ${answers.filter((a) => a.status !== status && a.status !== 409).map((a) => `${a.status} ${a.text}`).slice(0, 3)}`
  ).toBe(RACERS)
  expect(successes.length).toBeGreaterThanOrEqual(1)
  for (const a of inUse) expect(a.body.error.code).toBe("idempotency_key_in_use")
  const ids = new Set(successes.map((a) => a.body.data?.id ?? a.body.id))
  expect(ids.size).toBe(1)
  // exactly one answer is the original, every other success is its replay
  expect(successes.filter((a) => a.headers.get("idempotent-replayed") !== "true")).toHaveLength(1)
  return [...ids][0] as string
}

const rows = (query: string, ...params: Array<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<{ n: number }>(query, params)).pipe(Effect.map(([r]) => r!.n), Effect.orDie)

const Env = makeTestApp({ rateLimit: UNLIMITED, edge: { ...defaultEdgeConfig, clientRateLimit: UNLIMITED } })

layer(Env, { excludeTestServices: true, timeout: "120 seconds" })("1,000 identical mutations racing with one Idempotency-Key", (it) => {
  it.effect("createRun: one run, one stored 202 (the rest replays or in use), executed once; a retry replays it", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([{ type: "text", text: "once" }])
      const conversation = yield* s.conversation()
      const path = `${s.P}/conversations/${conversation.id}/runs`
      const body = { input: [{ type: "text", text: "race" }] }
      const runId = expectOneResult(yield* race(path, s.key, "race-run", body), 202)
      expect(yield* rows(`SELECT count(*)::int AS n FROM runs WHERE conversation_id = $1`, conversation.id)).toBe(1)
      expect(yield* rows(`SELECT count(*)::int AS n FROM idempotency_keys WHERE tenant_id = $1 AND key = 'race-run'`, s.tenantId)).toBe(1)
      const done = yield* eventually(s.getRun(runId), (r) => isTerminal(r.status))
      expect(done.status).toBe("succeeded")
      // executed once: one input and one answer in the conversation
      expect(yield* rows(`SELECT count(*)::int AS n FROM conversation_items WHERE conversation_id = $1`, conversation.id)).toBe(2)
      expectReplay(yield* race(path, s.key, "race-run", body, 10), 202, runId)
      expect(yield* rows(`SELECT count(*)::int AS n FROM runs WHERE conversation_id = $1`, conversation.id)).toBe(1)
    }))

  it.effect("createUser and createServiceActor: one row each; a retry replays it", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const user = { external_id: "racer", display_name: "Racer" }
      const userId = expectOneResult(yield* race(`${sb.P}/users`, sb.key, "race-user", user), 201)
      expect(yield* rows(`SELECT count(*)::int AS n FROM users WHERE tenant_id = $1`, sb.tenantId)).toBe(1)
      expectReplay(yield* race(`${sb.P}/users`, sb.key, "race-user", user, 10), 201, userId)

      const actorId = expectOneResult(yield* race(`${sb.P}/service-actors`, sb.key, "race-actor", { name: "racer" }), 201)
      expect(yield* rows(`SELECT count(*)::int AS n FROM service_actors WHERE tenant_id = $1 AND name = 'racer'`, sb.tenantId)).toBe(1)
      expectReplay(yield* race(`${sb.P}/service-actors`, sb.key, "race-actor", { name: "racer" }, 10), 201, actorId)
    }))
})
