/**
 * Webhook deliveries survive kill -9 (D18). The service runs as a child process on a shared
 * database (as in test/Recovery.test.ts), one delivery in flight per endpoint:
 *   - delivery 1 is mid-attempt (its receiver holds the request without answering) when the process
 *     is killed: its outcome is unknown, so after the restart, once its lease ran out, it is sent
 *     again with the same `webhook-id`: the one duplicate the design produces, which Standard
 *     Webhooks allows after an attempt whose outcome is unknown; its attempts record the unknown one;
 *   - delivery 2's event was committed while delivery 1 held the endpoint, so it was never sent
 *     when the process died: after the restart it is delivered exactly once.
 * Every request the receiver got verifies with `standardwebhooks` (real clock).
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN } from "./support/App.js"
import { childDatabase } from "./support/Database.js"
import { RUN_SCOPES } from "./support/Sandboxes.js"
import { callChild, type ChildServer, killAllChildren, startChild } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"
import { startReceiver, verifyAt } from "./support/WebhookReceiver.js"
import { WEBHOOK_SCOPES } from "./support/WebhookSandbox.js"

afterEach(killAllChildren)

/** A request to the child: the answer's JSON, or a failure naming it. */
const call = (base: string, method: string, path: string, token: string, body?: unknown) =>
  Effect.map(callChild(base, method, path, token, body), (res) => {
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.text}`)
    return res.json
  })

/** Polls `probe` (real time) until `check` holds; fails with `what` after `ms`. */
const until = <A>(what: string, probe: Effect.Effect<A>, check: (a: A) => boolean, ms = 40_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + ms
    let last = yield* probe
    while (!check(last)) {
      if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(last)})`)
      yield* realSleep(100)
      last = yield* probe
    }
    return last
  })

interface DeliveryRow {
  id: string
  status: string
  attempts: Array<{ status_code: number | null; error: string | null }>
  lease_until: Date | null
}

describe("webhook deliveries across kill -9", () => {
  it.live(
    "a committed event is delivered after a restart; an attempt cut short is sent again with the same webhook-id",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const { db, sql } = yield* childDatabase
        const receiver = yield* startReceiver(200)
        receiver.script.push("hang") // the first request is never answered
        const env = {
          OPERATOR_TOKEN,
          DESTINATION_ALLOWLIST: "127.0.0.1",
          // the same key in every process: endpoint secrets are stored encrypted with it
          SECRETS_KEY: randomBytes(32).toString("hex"),
          WEBHOOK_ENDPOINT_CONCURRENCY: "1",
          WEBHOOK_LEASE_SECONDS: "16"
        }
        let server: ChildServer = yield* Effect.promise(() => startChild(db.url, env))

        // ---- the customer's setup, over HTTP ----------------------------------------------------------
        const op = (method: string, path: string, body?: unknown) =>
          call(server.baseUrl, method, `/operator/v1${path}`, OPERATOR_TOKEN, body)
        const pilot = yield* op("POST", "/pilot-applications", { organization_name: "Hooks Co", contact_email: "ops@hooks.test" })
        const { tenant_id: tenantId } = yield* op("POST", `/pilot-applications/${pilot.id}/approve`)
        const key = (yield* op("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, {
          name: "hooks",
          scopes: [...RUN_SCOPES, ...WEBHOOK_SCOPES]
        })).secret as string
        const P = `/v1/tenants/${tenantId}/environments/sandbox`
        const post = (path: string, body?: unknown) => Effect.map(call(server.baseUrl, "POST", `${P}${path}`, key, body), (r) => r.data)
        const ws = yield* post("/workspaces", { name: "w" })
        const mp = yield* post("/model-profiles", {
          name: "s",
          provider: "scripted",
          model: "scripted-1",
          settings: { steps: [{ type: "text", text: "done" }] }
        })
        const agent = yield* post("/agents", { workspace_id: ws.id, name: "a" })
        const rev = yield* post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: [] })
        const endpoint = yield* post("/webhook-endpoints", { url: receiver.url, event_types: ["run.succeeded"] })
        const run = Effect.gen(function*() {
          const conversation = yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id })
          return (yield* post(`/conversations/${conversation.id}/runs`, { input: [{ type: "text", text: "hi" }] })).id as string
        })
        const deliveryOf = (runId: string) =>
          Effect.map(
            Effect.orDie(sql<DeliveryRow>`
            SELECT d.id, d.status, d.attempts, d.lease_until FROM webhook_deliveries d
            JOIN run_events e ON e.id = d.event_id WHERE e.run_id = ${runId}`),
            (rows) => rows[0]
          )

        // ---- delivery 1 in flight, delivery 2 committed behind it; then kill -9 -------------------------
        const first = yield* run
        yield* until("delivery 1 reaches the receiver", Effect.sync(() => receiver.hanging()), (n) => n === 1)
        const second = yield* run
        const waiting = yield* until("delivery 2 is committed", deliveryOf(second), (d) => d !== undefined)
        yield* realSleep(500)
        expect(receiver.received).toHaveLength(1)
        expect(yield* deliveryOf(second)).toMatchObject({ status: "pending", attempts: [], lease_until: null })
        yield* Effect.promise(() => server.kill9())
        const cut = yield* deliveryOf(first)
        expect(cut!.lease_until).not.toBeNull() // its attempt was under way: outcome unknown

        // ---- restart: both delivered --------------------------------------------------------------------
        server = yield* Effect.promise(() => startChild(db.url, env))
        const delivered = yield* until(
          "both delivered",
          Effect.all([deliveryOf(first), deliveryOf(second)]),
          ([a, b]) => a?.status === "succeeded" && b?.status === "succeeded"
        )
        yield* realSleep(1000)
        const ids = receiver.received.map((r) => r.headers["webhook-id"])
        expect(ids.filter((id) => id === cut!.id)).toHaveLength(2) // the duplicate after an unknown outcome
        expect(ids.filter((id) => id === waiting!.id)).toHaveLength(1) // exactly once
        expect(receiver.received).toHaveLength(3)
        for (const got of receiver.received) expect((verifyAt(endpoint.secret, got, Date.now()) as any).id).toBe(got.headers["webhook-id"])
        const [again, once] = delivered
        expect(again!.attempts.map((a) => a.status_code)).toEqual([null, 200])
        expect(again!.attempts[0]!.error).toContain("outcome unknown")
        expect(once!.attempts.map((a) => a.status_code)).toEqual([200])
      })),
    180_000
  )
})
