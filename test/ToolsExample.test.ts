/**
 * The platform against the customer tool SDK's example server (issue 5): the real service signs
 * and calls, the example (src/ToolServer/Example.ts) verifies with the SDK against our jwks.json
 * and keeps the write contract on its own Postgres. Reads, an approved write executed once, and
 * the ambiguous outcomes the SDK's hooks produce: a write still inside its transaction when the
 * call times out (reconciliation says `pending`, then `succeeded`), and a connection reset after
 * the commit.
 */
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import {
  CREATE_REFUND_PATH,
  type ExampleOptions,
  GET_ORDER_PATH,
  REFUND_RECONCILIATION_PATH,
  startExample
} from "../src/ToolServer/Example.js"
import { makeTestApp } from "./support/App.js"
import { freshDatabase } from "./support/Database.js"
import { TERMINAL } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { TOOL_ISSUER, toolSandbox, toolSettings } from "./support/ToolSandbox.js"

const exampleConnection = (baseUrl: string) =>
  connectionBody(baseUrl, { read: GET_ORDER_PATH, write: CREATE_REFUND_PATH, reconciliation: REFUND_RECONCILIATION_PATH })

/** A sandbox whose agent calls the example server, on its own database (the customer's). */
const setup = (steps: ReadonlyArray<Record<string, unknown>>, options: Partial<ExampleOptions> = {}) =>
  Effect.gen(function*() {
    const customerDb = yield* freshDatabase
    const db = yield* Layer.build(PgClient.layer({ url: Redacted.make(customerDb.url), maxConnections: 5 }))
    const s = yield* toolSandbox({
      server: (sb) =>
        startExample({ jwksUrl: sb.jwksUrl, issuer: TOOL_ISSUER, tenantId: sb.tenantId, environment: "sandbox", ...options }).pipe(
          Effect.provide(db)
        ),
      connection: exampleConnection,
      steps
    })
    return { ...s, example: s.server }
  })

const appLayer = () => makeTestApp(toolSettings())

/** The run succeeded, the write ran exactly once, and the agent got that refund. */
const succeededWithOneRefund = (s: Effect.Effect.Success<ReturnType<typeof setup>>, runId: string) =>
  Effect.gen(function*() {
    expect((yield* s.waitFor(runId, TERMINAL)).status).toBe("succeeded")
    const refunds = yield* s.example.refunds
    expect(refunds).toHaveLength(1)
    expect(s.example.writesExecuted()).toBe(1)
    const started = yield* s.toolEvent(runId, "run.tool_call.started")
    const completed = yield* s.toolEvent(runId, "run.tool_call.completed")
    expect(refunds[0]!.operation_id).toBe(started.data.operation_id)
    expect(completed.data.output).toEqual({ refund_id: refunds[0]!.refund_id, order_id: "o_1", amount: 700 })
  })

const REFUND_STEPS = [
  { type: "tool_call", tool: "create_refund", input: { order_id: "o_1", amount: 700 } },
  { type: "text", text: "Refunded." }
]

describe("platform -> SDK example server", () => {
  it.live("a read: the SDK verifies the platform's token and the order comes back to the agent", () =>
    Effect.gen(function*() {
      const s = yield* setup([{ type: "tool_call", tool: "get_order", input: { order_id: "o_2" } }, { type: "text", text: "Shipped." }])
      const run = yield* s.startRun
      expect((yield* s.waitFor(run.id, TERMINAL)).status).toBe("succeeded")
      const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
      expect(completed?.data.output).toEqual({ order_id: "o_2", status: "shipped", amount: 1200 })
    }).pipe(Effect.scoped, Effect.provide(appLayer())), 30_000)

  it.live("an approved write runs once in the customer's database; the agent gets the refund", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND_STEPS)
      const run = yield* s.startRun
      yield* s.decide(run.id)
      yield* succeededWithOneRefund(s, run.id)
    }).pipe(Effect.scoped, Effect.provide(appLayer())), 30_000)

  it.live(
    "a write still in its transaction when the call times out: reconciliation polls pending, then succeeded",
    () =>
      Effect.gen(function*() {
        const s = yield* setup(REFUND_STEPS)
        const held = yield* s.example.hooks.holdNextWrite
        const run = yield* s.startRun
        yield* s.decide(run.id)
        yield* held.reached
        // the platform's 2 s request timeout passes; reconciliation is asked and says pending
        yield* Effect.sleep("3500 millis")
        expect((yield* s.getRun(run.id)).status).toBe("running")
        expect(yield* s.example.refunds).toHaveLength(0)
        yield* held.release
        yield* succeededWithOneRefund(s, run.id)
      }).pipe(Effect.scoped, Effect.provide(appLayer())),
    30_000
  )

  it.live("a connection reset after the commit: never replayed, reconciled to the committed refund", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND_STEPS)
      s.example.hooks.afterNextCommit("reset")
      const run = yield* s.startRun
      yield* s.decide(run.id)
      yield* succeededWithOneRefund(s, run.id)
    }).pipe(Effect.scoped, Effect.provide(appLayer())), 30_000)

  it.live(
    "the SDK refuses real platform tokens meant for another audience or an older cell generation; the agent sees why",
    () =>
      Effect.gen(function*() {
        const READ = [{ type: "tool_call", tool: "get_order", input: { order_id: "o_2" } }, { type: "text", text: "Could not." }]
        for (
          const [options, code] of [
            [{ publicBaseUrl: "https://tools.acme.test" }, "wrong_audience"],
            [{ minCellGeneration: 2 }, "stale_cell_generation"]
          ] as const
        ) {
          const s = yield* setup(READ, options)
          const run = yield* s.startRun
          expect((yield* s.waitFor(run.id, TERMINAL)).status).toBe("succeeded")
          const failed = yield* s.toolEvent(run.id, "run.tool_call.failed")
          expect(failed?.data.error, code).toMatchObject({ type: "tool_error", status: 401, body: { error: { code } } })
        }
      }).pipe(Effect.scoped, Effect.provide(appLayer())),
    30_000
  )
})
