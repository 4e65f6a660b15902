/**
 * The webhook event types (D18) beyond a run's end: `run.requires_action`, then `approval.expired`
 * (enqueued in the transaction that expires the approval) and `run.expired`; `deletion_job.succeeded`
 * (in the purge's transaction); an environment's purge deletes its endpoints, events and deliveries; the
 * trigger on `run_events` enqueues exactly the run event types of the list, which are the state
 * machine's terminal events, `run.requires_action` and `run.reconciled`. TestClock; every delivery
 * verified with `standardwebhooks`.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { EventType, isTerminal, TABLE } from "../src/Domain/RunState.js"
import { WEBHOOK_RUN_EVENT_TYPES } from "../src/Domain/Webhooks.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectSingle } from "./support/Envelopes.js"
import { createUser, RUN_SCOPES } from "./support/Sandboxes.js"
import { REFUND, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { advanceUntil } from "./support/Waiting.js"
import { type Receiver, startReceiver, verify } from "./support/WebhookReceiver.js"
import { waitFor, WEBHOOK_SCOPES, webhookSandbox, webhookSettings } from "./support/WebhookSandbox.js"

const count = (r: Receiver) => Effect.sync(() => r.received.length)
/** The bodies the receiver got from the `from`th on, verified now, by type. */
const bodies = (r: Receiver, secret: string, from: number) =>
  Effect.forEach(r.received.slice(from), (got) => Effect.map(verify(secret, got), (body) => [body.type as string, body] as const)).pipe(
    Effect.map((pairs) => new Map(pairs))
  )

describe("webhook event types", () => {
  it.effect("an approval nobody decides: run.requires_action, then approval.expired and run.expired", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const receiver = yield* startReceiver()
        const s = yield* toolHostSandbox(REFUND)
        const hooksKey = (yield* createKey(s.sb.tenantId, WEBHOOK_SCOPES, "webhooks")).secret
        const endpoint = expectSingle(
          yield* request("POST", `${s.sb.P}/webhook-endpoints`, {
            key: hooksKey,
            body: { url: receiver.url, event_types: ["run.requires_action", "approval.expired", "run.expired"] }
          }),
          201
        )
        const run = yield* s.startRun
        yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
        yield* waitFor(count(receiver), (n) => n >= 1)
        const asked = yield* verify(endpoint.secret, receiver.received[0]!)
        expect(asked.type).toBe("run.requires_action")
        expect(asked.data).toMatchObject({ run_id: run.id, type: "run.requires_action" })
        expect(asked.data.data.required_action.type).toBe("approval")

        yield* advanceUntil("30 seconds", s.getRun(run.id), (r) => isTerminal(r.status))
        yield* waitFor(count(receiver), (n) => n >= 3)
        const got = yield* bodies(receiver, endpoint.secret, 1)
        const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        expect(approval.status).toBe("expired")
        expect(got.get("approval.expired")).toMatchObject({
          type: "approval.expired",
          tenant_id: s.sb.tenantId,
          environment: "sandbox",
          data: approval
        })
        expect(got.get("run.expired")!.data).toMatchObject({ run_id: run.id, data: { status_reason: "approval_expired" } })
        const deliveries = (yield* request("GET", `${s.sb.P}/webhook-deliveries`, { key: hooksKey })).body.items
        const expired = deliveries.find((d: any) => d.event_type === "approval.expired")
        expect(expired.event_id).toMatch(/^evt_/)
        expect(expired.id).toBe(got.get("approval.expired")!.id)
      }).pipe(
        Effect.scoped,
        Effect.provide(makeTestApp({ ...webhookSettings(), ...toolSettings(), cellIdleTimeoutSeconds: 3600 }))
      )
    }), 60_000)

  it.effect(
    "a user's deletion job: deletion_job.succeeded once it purged; an environment's purge deletes its endpoints and deliveries",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const receiver = yield* startReceiver()
          const s = yield* webhookSandbox()
          const admin = (yield* createKey(s.tenantId, ["users:read", "users:write", "environments:write", ...RUN_SCOPES], "admin")).secret
          const endpoint = yield* s.createEndpoint(receiver.url, ["deletion_job.succeeded", "run.succeeded"])
          yield* s.finishedRun()
          yield* waitFor(count(receiver), (n) => n >= 1)
          expect((yield* verify(endpoint.secret, receiver.received[0]!)).type).toBe("run.succeeded")
          const user = yield* createUser(s.P, admin, "gone-soon")
          const deleted = yield* request("DELETE", `${s.P}/users/${user.id}`, { key: admin })
          expect(deleted.status).toBe(202)
          const job = yield* advanceUntil(
            "1 minute",
            Effect.map(request("GET", deleted.headers.get("location")!, { key: admin }), (r) => r.body.data),
            (j) => j.state === "succeeded",
            120
          )
          yield* waitFor(count(receiver), (n) => n >= 2)
          const got = yield* bodies(receiver, endpoint.secret, 1)
          expect(got.get("deletion_job.succeeded")).toMatchObject({ type: "deletion_job.succeeded", data: job })
          const cellRows = Effect.map(
            sql<{ endpoints: number; deliveries: number; events: number }>`
            SELECT (SELECT count(*)::int FROM webhook_endpoints WHERE tenant_id = ${s.tenantId}) AS endpoints,
                   (SELECT count(*)::int FROM webhook_deliveries WHERE tenant_id = ${s.tenantId}) AS deliveries,
                   (SELECT count(*)::int FROM webhook_events WHERE tenant_id = ${s.tenantId}) AS events`,
            (rows) => rows[0]!
          )
          expect(yield* cellRows).toEqual({ endpoints: 1, deliveries: 2, events: 2 })

          // the environment's deletion: purged with everything else of the cell
          expect((yield* request("DELETE", s.P, { key: admin })).status).toBe(202)
          const purged = yield* advanceUntil("1 minute", cellRows, (n) => n.endpoints === 0, 120)
          expect(purged).toEqual({ endpoints: 0, deliveries: 0, events: 0 })
        }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...webhookSettings(), sweepIntervalSeconds: 60 })))
      }),
    60_000
  )

  it.effect("the run_events trigger announces exactly the listed run event types: the terminal ones, requires_action, reconciled", () =>
    Effect.gen(function*() {
      const terminal = [...new Set(TABLE.filter((r) => r.to !== "same" && isTerminal(r.to)).map((r) => r.event))]
      expect([...WEBHOOK_RUN_EVENT_TYPES].sort()).toEqual([...terminal, "run.requires_action", "run.reconciled"].sort())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const [trigger] = yield* sql<{ def: string }>`
          SELECT pg_get_triggerdef(oid) AS def FROM pg_trigger WHERE tgname = 'run_events_webhooks'`
        for (const type of EventType.literals) {
          const listed = trigger!.def.includes(`'${type}'`)
          expect(listed, type).toBe((WEBHOOK_RUN_EVENT_TYPES as ReadonlyArray<string>).includes(type))
        }
      }).pipe(Effect.provide(makeTestApp()))
    }))
})
