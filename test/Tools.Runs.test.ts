/**
 * Runs calling customer tools end to end (issue 5): the real service, a real tool server on
 * 127.0.0.1 (allowlisted) verifying invocation tokens with jose against our jwks.json, a scripted
 * agent proposing the calls. Reads, schemas checked both ways, writes waiting for a user's
 * approval and executed once, revocation re-checked at approval, denials, and ambiguous writes
 * reconciled, never replayed.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, request } from "./support/Client.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { TERMINAL } from "./support/Sandboxes.js"
import { REFUND, TOOL_ISSUER, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { eventually } from "./support/Waiting.js"

describe("tool runs", () => {
  it.live("a read: signed call verified by jose against jwks.json, output back to the agent, run succeeded", () =>
    Effect.gen(function*() {
      const s = yield* toolHostSandbox([
        { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
        { type: "text", text: "Your order is shipped." }
      ])
      const run = yield* s.startRun
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.rejected).toEqual([])
      expect(s.host.calls).toHaveLength(1)
      const { claims } = s.host.calls[0]!
      expect(claims).toMatchObject({
        iss: TOOL_ISSUER,
        aud: `${s.host.baseUrl}/orders/get`,
        tenant_id: s.sb.tenantId,
        environment: "sandbox",
        run_id: run.id,
        tool_id: s.tools.find((t: any) => t.name === "get_order").id
      })
      expect(claims.exp - claims.iat).toBeLessThanOrEqual(60)
      const types = (yield* s.eventList(run.id)).map((e) => e.type)
      expect(types).toEqual([
        "run.queued",
        "run.started",
        "run.message",
        "run.tool_call.started",
        "run.tool_call.completed",
        "run.message",
        "run.succeeded"
      ])
      const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
      expect(completed.data.output).toEqual({ order_id: "o-1", status: "shipped", amount: 42 })
      expect(done.usage.tool_calls ?? 1).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live(
    "input is checked against the input schema before the call, output against the output schema after it",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox([
          { type: "tool_call", tool: "get_order", input: { order_id: 5 } },
          { type: "tool_call", tool: "get_order", input: { order_id: "o-broken" } },
          { type: "text", text: "Sorry." }
        ])
        const run = yield* s.startRun
        expect((yield* s.waitFor(run.id, TERMINAL)).status).toBe("succeeded")
        const failures = (yield* s.eventList(run.id)).filter((e) => e.type === "run.tool_call.failed").map((e) => e.data.error.type)
        expect(failures).toEqual(["invalid_input", "invalid_output"])
        // the bad input never left; the bad output came from the one call made
        expect(s.host.calls.map((c) => JSON.parse(c.body))).toEqual([{ order_id: "o-broken" }])
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live(
    "a write: requires_action with the exact details; a key alone cannot decide; approved, executed exactly once",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        const run = yield* s.startRun
        const waiting = yield* s.waitFor(run.id, ["requires_action", ...TERMINAL])
        expect(waiting.status).toBe("requires_action")
        const approvals = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        expect(approvals).toHaveLength(1)
        const approval = approvals[0]
        expect(approval).toMatchObject({
          status: "pending",
          input: { order_id: "o-1", amount: 5 },
          destination_url: `${s.host.baseUrl}/refunds`,
          agent_revision_id: s.rev.id,
          operation: { name: "create_refund", effect: "write" }
        })
        expect(s.host.calls).toHaveLength(0)
        // waiting for a human holds no fiber: the run is parked on the cell's timer
        const cellStats = Effect.map(operator("GET", `/tenants/${s.sb.tenantId}/environments/sandbox/cell`), (r) => {
          expect(r.status, r.text).toBe(200)
          return r.body
        })
        expect(yield* cellStats).toMatchObject({ running_actors: 0, parked_runs: 1 })
        expectErrorCode(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }), 403, "actor_required")
        expectErrorCode(
          yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": "act_forged" }),
          403,
          "actor_token_invalid"
        )
        const token = yield* s.actorToken
        const decided = expectSingle(
          yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": token })
        )
        expect(decided).toMatchObject({ status: "approved", decided_by: { type: "user", id: s.user.id } })
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done.status).toBe("succeeded")
        expect(s.host.refunds.size).toBe(1)
        expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
        expect(yield* eventually(cellStats, (c) => c.running_actors === 0)).toMatchObject({ running_actors: 0, parked_runs: 0 })
        const types = (yield* s.eventList(run.id)).map((e) => e.type)
        expect(types).toEqual([
          "run.queued",
          "run.started",
          "run.message",
          "run.requires_action",
          "run.approval.decided",
          "run.tool_call.started",
          "run.tool_call.completed",
          "run.message",
          "run.succeeded"
        ])
        const started = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.started")
        expect(s.host.calls[0]!.operationId).toBe(started.data.operation_id)
        expectErrorCode(
          yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "deny" }, { "x-actor-token": token }),
          409,
          "approval_not_pending"
        )
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live(
    "approval re-checks revocation: the run's key revoked while it waited -> authorization_revoked, the write never called",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        const runner = yield* createKey(s.sb.tenantId, ["conversations:write", "runs:write", "runs:read"], "runner")
        const admin = (yield* createKey(s.sb.tenantId, ["keys:revoke", "conversations:write", "runs:write", "runs:read"], "admin")).secret
        const conv = expectSingle(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
        const run = expectSingle(
          yield* request("POST", `${s.sb.P}/conversations/${conv.id}/runs`, {
            key: runner.secret,
            body: { input: [{ type: "text", text: "refund" }] }
          }),
          202
        )
        yield* s.approvalOf(run.id)
        const revoked = yield* request("POST", `${s.sb.P}/api-keys/${runner.id}/revoke`, { key: admin })
        expect(revoked.status, revoked.text).toBe(200)
        yield* s.decide(run.id)
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done).toMatchObject({ status: "failed", status_reason: "authorization_revoked" })
        expect(s.host.calls).toHaveLength(0)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live("a denied write is never called; the agent gets a denied result and the run continues", () =>
    Effect.gen(function*() {
      const s = yield* toolHostSandbox([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "Okay, no refund." }
      ])
      const run = yield* s.startRun
      yield* s.decide(run.id, "deny", "not eligible")
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.calls).toHaveLength(0)
      const failed = yield* s.toolEvent(run.id, "run.tool_call.failed")
      expect(failed.data.error).toMatchObject({ type: "denied", reason: "not eligible" })
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live(
    "an ambiguous write (500 after commit) is reconciled, never replayed: succeeded continues with its output",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        s.host.knobs.afterWrite = "500"
        const run = yield* s.startRun
        yield* s.decide(run.id)
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done.status).toBe("succeeded")
        expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
        expect(s.host.calls.filter((c) => c.path.startsWith("/refunds/operations/"))).toHaveLength(1)
        const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
        expect(completed.data.output).toEqual([...s.host.refunds.values()][0])
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live("an ambiguous write the customer never applied: not_found is a tool failure the agent sees", () =>
    Effect.gen(function*() {
      const s = yield* toolHostSandbox([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "The refund did not go through." }
      ])
      // the customer's commit fails: reconciliation will not find the operation
      s.host.knobs.afterWrite = "rolled_back"
      const run = yield* s.startRun
      yield* s.decide(run.id)
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      const failed = yield* s.toolEvent(run.id, "run.tool_call.failed")
      expect(failed.data.error.type).toBe("write_not_applied")
      expect(s.host.calls.map((c) => c.path)).toEqual([
        "/refunds",
        `/refunds/operations/${encodeURIComponent(s.host.calls[0]!.operationId!)}`
      ])
      expect(s.host.refunds.size).toBe(0)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live(
    "a write applied after the platform gave up on its answer: not_found is not final until the write's token expired, whose life began at the dispatch's commit",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        // the tool commits 3 s after the write arrived; the platform's answer times out at 2 s,
        // and reconciliation (asked every second) says not_found until then
        s.host.knobs.afterWrite = "late"
        const run = yield* s.startRun
        yield* s.decide(run.id)
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done.status).toBe("succeeded")
        expect(s.host.refunds.size).toBe(1)
        const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
        expect(completed.data.output).toEqual([...s.host.refunds.values()][0])
        const write = s.host.calls.find((c) => c.path === "/refunds")!
        expect(s.host.calls.filter((c) => c.path.startsWith("/refunds/operations/")).length).toBeGreaterThan(1)
        // the write's token lives from the commit of its operation, not from its signing
        const sql = yield* SqlClient.SqlClient
        const [op] = yield* sql<{ created_at: Date }>`SELECT created_at FROM tool_operations WHERE id = ${write.operationId!}`
        expect(write.claims.iat).toBe(Math.floor(op!.created_at.getTime() / 1000))
        expect(write.claims.exp - write.claims.iat).toBe(5)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings({ tokenSeconds: 5, clockToleranceSeconds: 1 })))),
    30_000
  )

  it.live(
    "no answer and no reconciliation: outcome_unknown (never rerun); a later reconciliation adds run.reconciled",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        s.host.knobs.afterWrite = "hang"
        s.host.knobs.reconciliation = "500"
        const run = yield* s.startRun
        yield* s.decide(run.id)
        const lost = yield* s.waitFor(run.id, TERMINAL, 400)
        expect(lost.status).toBe("outcome_unknown")
        expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
        // the write was sent: its tool_call usage record (D16) came with the outcome_unknown commit
        expect(lost.usage.tool_calls).toBe(1)
        const history = yield* s.eventList(run.id)
        s.host.knobs.reconciliation = "truth"
        const receipts = yield* eventually(s.eventList(run.id), (items) => items.some((e) => e.type === "run.reconciled"), 100)
        const receipt = receipts.find((e) => e.type === "run.reconciled")
        expect(receipt.data).toMatchObject({ status: "succeeded", output: [...s.host.refunds.values()][0] })
        // historic events unchanged, status kept, and the write was not called again
        expect(receipts.slice(0, history.length)).toEqual(history)
        expect((yield* s.getRun(run.id)).status).toBe("outcome_unknown")
        expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings({ reconcileRetrySeconds: 1 })))),
    60_000
  )
})
