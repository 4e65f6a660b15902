/**
 * The customer tool SDK's write contract (4.1.2) against the example orders server on its own
 * Postgres: one operation id makes one write however often and however concurrently it is
 * delivered; after a hang, reset or 500 past the commit, reconciliation reports the committed
 * outcome; unknown operation ids; refused writes stored as failed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { CREATE_REFUND_PATH } from "../src/ToolServer/Example.js"
import { call } from "./support/Invocations.js"
import { invoke, newOperationId, ok, reconcile, refund, rejected, setup } from "./support/ToolServerHarness.js"

describe("tool server SDK: the write contract (4.1.2)", () => {
  it.scopedLive("one operation id sent 3 times makes one refund; every answer is the first one's", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const first = ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId }))
      expect(first).toEqual({ refund_id: expect.stringMatching(/^rf_/), order_id: "o_1", amount: 700 })
      for (let i = 0; i < 2; i++) {
        expect(ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId }))).toEqual(first)
      }
      expect(yield* env.example.refunds).toEqual([{ ...first, operation_id: operationId }])
      expect(env.example.writesExecuted()).toBe(1)
      // another operation id is another refund
      const second = ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId: newOperationId() }))
      expect(second.refund_id).not.toBe(first.refund_id)
      expect((yield* env.example.refunds).length).toBe(2)
    }))

  it.scopedLive("5 concurrent deliveries of one operation id: the others wait for the commit, one refund, same answer", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const held = yield* env.example.hooks.holdNextWrite
      const deliveries = yield* Effect.forkAll(
        Array.from({ length: 5 }, () => invoke(env, CREATE_REFUND_PATH, refund("o_2", 100), { operationId })),
        { discard: false }
      )
      yield* held.reached
      yield* Effect.sleep("300 millis") // the other four reach the lock meanwhile
      // in flight, not committed: reconciliation says pending
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "pending" })
      expect((yield* env.example.refunds).length).toBe(0)
      yield* held.release
      const replies = (yield* Fiber.join(deliveries)).map(ok)
      expect(new Set(replies.map((r) => JSON.stringify(r))).size).toBe(1)
      expect(yield* env.example.refunds).toEqual([{ ...replies[0], operation_id: operationId }])
      expect(env.example.writesExecuted()).toBe(1)

      // and without the hold: 5 at once on a new id
      const again = newOperationId()
      const burst = yield* Effect.all(
        Array.from({ length: 5 }, () => invoke(env, CREATE_REFUND_PATH, refund("o_2", 50), { operationId: again })),
        { concurrency: "unbounded" }
      )
      expect(new Set(burst.map((r) => JSON.stringify(ok(r)))).size).toBe(1)
      expect((yield* env.example.refunds).filter((r) => r.operation_id === again).length).toBe(1)
      expect(env.example.writesExecuted()).toBe(2)
    }))

  it.scopedLive("hang after commit: the caller times out, reconciliation says succeeded with the output, a redelivery replays it", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      env.example.hooks.afterNextCommit("hang")
      const reply = yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 300), { operationId, timeoutMs: 1_000 })
      expect(reply).toMatchObject({ _tag: "Failed", reason: "timeout" })
      const [row] = yield* env.example.refunds
      expect(row).toMatchObject({ order_id: "o_1", amount: 300, operation_id: operationId })
      const output = { refund_id: row!.refund_id, order_id: "o_1", amount: 300 }
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "succeeded", output })
      expect(ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 300), { operationId }))).toEqual(output)
      expect((yield* env.example.refunds).length).toBe(1)
      expect(env.example.writesExecuted()).toBe(1)
    }))

  it.scopedLive("reset or 500 after commit: reconciliation still reports the committed outcome", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const a = newOperationId()
      env.example.hooks.afterNextCommit("reset")
      expect(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 10), { operationId: a })).toMatchObject({
        _tag: "Failed",
        reason: "network"
      })
      expect(ok(yield* reconcile(env, a))).toMatchObject({ operation_id: a, status: "succeeded", output: { amount: 10 } })

      const b = newOperationId()
      env.example.hooks.afterNextCommit("error_500")
      rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 20), { operationId: b }), 500, "internal_error")
      expect(ok(yield* reconcile(env, b))).toMatchObject({ operation_id: b, status: "succeeded", output: { amount: 20 } })
      expect((yield* env.example.refunds).map((r) => r.operation_id).sort()).toEqual([a, b].sort())
    }))

  it.scopedLive("an operation id never seen is not_found; reconciliation is signed for that operation id", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "not_found" })
      rejected(yield* reconcile(env, operationId, { token: null }), 401, "missing_token")
      rejected(yield* reconcile(env, operationId, { tokenOperationId: "op_other" }), 401, "operation_id_mismatch")
      // a token for the invocation URL is not one for the reconciliation URL
      const token = yield* Effect.promise(() =>
        env.platform.sign({ audience: `${env.example.baseUrl}${CREATE_REFUND_PATH}`, body: "", operationId })
      )
      rejected(
        yield* call("GET", `${env.example.baseUrl}/refunds/operations/${operationId}`, { token, operationId }),
        401,
        "wrong_audience"
      )
    }))

  it.scopedLive("a refused write is stored as failed: the write's rows roll back, a replay gets the same failure, reconciliation says failed", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const first = rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId }), 422, "refund_exceeds_order")
      expect((yield* env.example.refunds).length).toBe(0) // inserted, then rolled back to the savepoint
      const [stored] = yield* env.sql<{ status: string; completed_at: Date | null }>`
        SELECT status, completed_at FROM tool_operations WHERE operation_id = ${operationId}`
      expect(stored?.status).toBe("failed")
      expect(stored?.completed_at).toBeInstanceOf(Date)

      // even once the refund would fit, the operation id keeps its outcome
      yield* env.sql`UPDATE orders SET amount = 10000 WHERE order_id = 'o_1'`
      expect(rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId }), 422, "refund_exceeds_order")).toEqual(
        first
      )
      expect(env.example.writesExecuted()).toBe(1)
      expect(ok(yield* reconcile(env, operationId))).toEqual({
        operation_id: operationId,
        status: "failed",
        error: first.error
      })
      // an unknown order is a stored failure too
      const other = newOperationId()
      rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_404", 1), { operationId: other }), 404, "order_not_found")
      expect(ok(yield* reconcile(env, other))).toMatchObject({ status: "failed", error: { code: "order_not_found" } })
      // and a new operation id runs the write again
      ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId: newOperationId() }))
      expect((yield* env.example.refunds).length).toBe(1)
    }))
})
