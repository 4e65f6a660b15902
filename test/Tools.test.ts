/**
 * Customer tools and approvals end to end (issue 5): the real service, a real tool server on
 * 127.0.0.1 (allowlisted) verifying invocation tokens with jose against our jwks.json, a scripted
 * agent proposing the calls, and a user approving through an actor session.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Option, TestClock } from "effect"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { defaultToolConfig } from "../src/Config/AppConfig.js"
import { freshDatabase, makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"
import { connectionBody, startToolHost } from "./support/ToolHost.js"
import { data, TERMINAL, TOOL_ISSUER, TOOL_SCOPES, toolSandbox } from "./support/ToolSandbox.js"
import { advanceUntil, eventually } from "./support/Waiting.js"

const ISSUER = TOOL_ISSUER
const SCOPES = TOOL_SCOPES

const expectError = (res: Reply, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.body.error.code, res.text).toBe(code)
}

const toolSettings = (overrides: Partial<typeof defaultToolConfig> = {}) => ({
  tools: {
    ...defaultToolConfig,
    issuer: Option.some(ISSUER),
    destinationAllowlist: "127.0.0.1/32",
    requestTimeoutSeconds: 2,
    reconcilePollSeconds: 1,
    ...overrides
  }
})

/** The agent proposes a refund, then says it is done. */
const REFUND = [
  { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
  { type: "text", text: "Refunded." }
]

/** A sandbox with a reviewed connection to a live tool host, an identity provider and a user. */
const setup = (steps: ReadonlyArray<Record<string, unknown>>) =>
  Effect.map(
    toolSandbox({
      server: (sb) => startToolHost({ jwksUrl: () => sb.jwksUrl, issuer: ISSUER, tenantId: () => sb.tenantId }),
      connection: connectionBody,
      steps
    }),
    (s) => {
      expect(s.tools.map((t) => t.name).sort()).toEqual(["create_refund", "get_order"])
      return { ...s, host: s.server }
    }
  )

describe("connections", () => {
  it.live("registration refuses unsafe destinations and invalid schemas; tools exist only after review", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const key = (yield* createKey(sb.tenantId, SCOPES, "manager")).secret
      const register = (body: unknown) => request("POST", `${sb.P}/connections`, { key, body })
      for (const url of ["http://tools.example.com", "https://10.0.0.8", "https://169.254.169.254", "https://localhost:8443", "https://2130706433", "https://[::ffff:127.0.0.2]"]) {
        expectError(yield* register(connectionBody(url)), 400, "destination_refused")
      }
      const bad = connectionBody("https://127.0.0.1:9")
      ;(bad.operations[0] as any).input_schema = { type: "objekt" }
      expectError(yield* register(bad), 400, "invalid_json_schema")
      const noRecon = connectionBody("https://127.0.0.1:9")
      delete (noRecon.operations[1] as any).reconciliation_path
      expectError(yield* register(noRecon), 400, "parameter_missing")

      const conn = data(yield* register(connectionBody("https://127.0.0.1:9")), 201)
      expect(conn.status).toBe("pending_review")
      const before = yield* request("GET", `${sb.P}/tools`, { key })
      expect(before.body.items).toEqual([])
      const reviewed = yield* operator("POST", `/connections/${conn.id}/review`, { decision: "approve" })
      expect(reviewed.body.tool_ids).toHaveLength(2)
      expectError(yield* operator("POST", `/connections/${conn.id}/review`, { decision: "approve" }), 409, "connection_already_reviewed")
      // the quickstart key cannot register tools
      expectError(yield* request("POST", `${sb.P}/connections`, { key: sb.key, body: connectionBody("https://127.0.0.1:9") }), 403, "missing_scope")
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)
})

describe("tool references", () => {
  it.live("revisions reference only reviewed tools of their own tenant and environment; a rejected connection makes none", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      // another tenant, with a connection to the same host
      const other = yield* provisionSandbox(undefined, "Globex")
      const otherKey = (yield* createKey(other.tenantId, SCOPES, "manager")).secret
      const otherCall = (method: string, path: string, body?: unknown) =>
        request(method, `${other.P}${path}`, { key: otherKey, ...(body === undefined ? {} : { body }) })
      const rejectedConn = data(yield* otherCall("POST", "/connections", connectionBody(s.host.baseUrl)), 201)
      const rejected = yield* operator("POST", `/connections/${rejectedConn.id}/review`, { decision: "reject", note: "unknown vendor" })
      expect(rejected.body).toMatchObject({ status: "rejected", tool_ids: [] })
      expect((yield* otherCall("GET", `/tools?connection_id=${rejectedConn.id}`)).body.items).toEqual([])

      const ws = data(yield* otherCall("POST", "/workspaces", { name: "W" }), 201)
      const mp = data(yield* otherCall("POST", "/model-profiles", { name: "s", provider: "scripted", model: "m", settings: { steps: REFUND } }), 201)
      const agent = data(yield* otherCall("POST", "/agents", { workspace_id: ws.id, name: "A" }), 201)
      const revise = (tool_ids: ReadonlyArray<string>) =>
        otherCall("POST", `/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "x", tool_ids })
      const foreign = yield* revise([s.tools[0].id])
      expectError(foreign, 400, "unknown_tool")
      expect(foreign.body.error.param).toBe("tool_ids.0")
      expect((yield* otherCall("GET", `/tools/${s.tools[0].id}`)).status).toBe(404)
      // the control: its own reviewed tools are accepted
      const ownConn = data(yield* otherCall("POST", "/connections", connectionBody(s.host.baseUrl)), 201)
      const approved = yield* operator("POST", `/connections/${ownConn.id}/review`, { decision: "approve" })
      expect(data(yield* revise(approved.body.tool_ids), 201).tool_ids).toEqual(approved.body.tool_ids)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)
})

describe("tool runs", () => {
  it.live("a read: signed call verified by jose against jwks.json, output back to the agent, run succeeded", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
        { type: "text", text: "Your order is shipped." }
      ])
      const run = yield* s.startRun
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.rejected).toEqual([])
      expect(s.host.calls).toHaveLength(1)
      const { claims } = s.host.calls[0]!
      expect(claims).toMatchObject({ iss: ISSUER, aud: `${s.host.baseUrl}/orders/get`, tenant_id: s.sb.tenantId, environment: "sandbox", run_id: run.id, tool_id: s.tools.find((t: any) => t.name === "get_order").id })
      expect(claims.exp - claims.iat).toBeLessThanOrEqual(60)
      const types = (yield* s.eventList(run.id)).map((e) => e.type)
      expect(types).toEqual(["run.queued", "run.started", "run.message", "run.tool_call.started", "run.tool_call.completed", "run.message", "run.succeeded"])
      const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
      expect(completed.data.output).toEqual({ order_id: "o-1", status: "shipped", amount: 42 })
      expect(done.usage.tool_calls ?? 1).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("input is checked against the input schema before the call, output against the output schema after it", () =>
    Effect.gen(function*() {
      const s = yield* setup([
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
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("a write: requires_action with the exact details; a key alone cannot decide; approved, executed exactly once", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
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
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }), 403, "actor_required")
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": "act_forged" }), 403, "actor_token_invalid")
      const token = yield* s.actorToken
      const decided = data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": token }))
      expect(decided).toMatchObject({ status: "approved", decided_by: { type: "user", id: s.user.id } })
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.refunds.size).toBe(1)
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      expect(yield* eventually(cellStats, (c) => c.running_actors === 0)).toMatchObject({ running_actors: 0, parked_runs: 0 })
      const types = (yield* s.eventList(run.id)).map((e) => e.type)
      expect(types).toEqual(["run.queued", "run.started", "run.message", "run.requires_action", "run.approval.decided", "run.tool_call.started", "run.tool_call.completed", "run.message", "run.succeeded"])
      const started = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.started")
      expect(s.host.calls[0]!.operationId).toBe(started.data.operation_id)
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "deny" }, { "x-actor-token": token }), 409, "approval_not_pending")
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("approval re-checks revocation: the run's key revoked while it waited -> authorization_revoked, the write never called", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      const runner = yield* createKey(s.sb.tenantId, ["conversations:write", "runs:write", "runs:read"], "runner")
      const admin = (yield* createKey(s.sb.tenantId, ["keys:revoke", "conversations:write", "runs:write", "runs:read"], "admin")).secret
      const conv = data(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
      const run = data(yield* request("POST", `${s.sb.P}/conversations/${conv.id}/runs`, { key: runner.secret, body: { input: [{ type: "text", text: "refund" }] } }), 202)
      yield* s.approvalOf(run.id)
      const revoked = yield* request("POST", `${s.sb.P}/api-keys/${runner.id}/revoke`, { key: admin })
      expect(revoked.status, revoked.text).toBe(200)
      yield* s.decide(run.id)
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done).toMatchObject({ status: "failed", status_reason: "authorization_revoked" })
      expect(s.host.calls).toHaveLength(0)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("a denied write is never called; the agent gets a denied result and the run continues", () =>
    Effect.gen(function*() {
      const s = yield* setup([
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

  it.live("an ambiguous write (500 after commit) is reconciled, never replayed: succeeded continues with its output", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      s.host.knobs.afterWrite = "500"
      const run = yield* s.startRun
      yield* s.decide(run.id)
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      expect(s.host.calls.filter((c) => c.path.startsWith("/refunds/operations/"))).toHaveLength(1)
      const completed = yield* s.toolEvent(run.id, "run.tool_call.completed")
      expect(completed.data.output).toEqual([...s.host.refunds.values()][0])
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("an ambiguous write the customer never applied: not_found is a tool failure the agent sees", () =>
    Effect.gen(function*() {
      const s = yield* setup([
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
      expect(s.host.calls.map((c) => c.path)).toEqual(["/refunds", `/refunds/operations/${encodeURIComponent(s.host.calls[0]!.operationId!)}`])
      expect(s.host.refunds.size).toBe(0)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("no answer and no reconciliation: outcome_unknown (never rerun); a later reconciliation adds run.reconciled", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      s.host.knobs.afterWrite = "hang"
      s.host.knobs.reconciliation = "500"
      const run = yield* s.startRun
      yield* s.decide(run.id)
      const lost = yield* s.waitFor(run.id, TERMINAL, 400)
      expect(lost.status).toBe("outcome_unknown")
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      const history = yield* s.eventList(run.id)
      s.host.knobs.reconciliation = "truth"
      const receipts = yield* eventually(s.eventList(run.id), (items) => items.some((e) => e.type === "run.reconciled"), 100)
      const receipt = receipts.find((e) => e.type === "run.reconciled")
      expect(receipt.data).toMatchObject({ status: "succeeded", output: [...s.host.refunds.values()][0] })
      // historic events unchanged, status kept, and the write was not called again
      expect(receipts.slice(0, history.length)).toEqual(history)
      expect((yield* s.getRun(run.id)).status).toBe("outcome_unknown")
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings({ reconcileRetrySeconds: 1 })))), 60_000)
})

describe("acting users, cancel during a write", () => {
  it.live("a run made with X-Actor-Token acts for the user; deleting the user stops it before its next tool call", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
        { type: "sleep", seconds: 2 },
        { type: "tool_call", tool: "get_order", input: { order_id: "o-2" } },
        { type: "text", text: "Done." }
      ])
      // without a token the service key acts
      const keyRun = yield* s.startRun
      expect(keyRun.user_id).toBeNull()
      expect((yield* s.waitFor(keyRun.id, TERMINAL)).status).toBe("succeeded")
      const keyClaims = s.host.calls[0]!.claims
      expect(keyClaims.actor.type).toBe("api_key")
      expect(keyClaims.sub).toBe(keyClaims.actor.id)
      const conv = data(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
      expectError(yield* s.call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "hi" }] }, { "x-actor-token": "act_forged" }), 403, "actor_token_invalid")

      const run = yield* s.startRunWith({ "x-actor-token": yield* s.actorToken })
      expect(run.user_id).toBe(s.user.id)
      expect((yield* s.getRun(run.id)).user_id).toBe(s.user.id)
      yield* eventually(Effect.succeed(s.host.calls), (calls) => calls.length === 3)
      expect(s.host.calls[2]!.claims).toMatchObject({ sub: s.user.id, actor: { type: "user", id: s.user.id }, run_id: run.id })
      // the model is "thinking" (2 s) before its second tool call: the user goes away meanwhile
      expect((yield* s.call("DELETE", `/users/${s.user.id}`)).status).toBe(202)
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done).toMatchObject({ status: "failed", status_reason: "authorization_revoked" })
      expect(s.host.calls).toHaveLength(3)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("idempotency of a user's request is scoped by the user: a retry with a fresh token replays, the key alone does not", () =>
    Effect.gen(function*() {
      const s = yield* setup([{ type: "text", text: "Hello." }])
      const conv = data(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
      const post = (headers: Record<string, string>) =>
        request("POST", `${s.sb.P}/conversations/${conv.id}/runs`, { key: s.key, idempotencyKey: "run-once-1", body: { input: [{ type: "text", text: "hi" }] }, headers })
      const first = yield* post({ "x-actor-token": yield* s.actorToken })
      expect(first.status, first.text).toBe(202)
      const retried = yield* post({ "x-actor-token": yield* s.actorToken })
      expect(retried.headers.get("idempotent-replayed")).toBe("true")
      expect(retried.body.data.id).toBe(first.body.data.id)
      yield* s.waitFor(first.body.data.id, TERMINAL)
      const asKey = yield* post({})
      expect(asKey.status, asKey.text).toBe(202)
      expect(asKey.headers.get("idempotent-replayed")).toBeNull()
      expect(asKey.body.data).toMatchObject({ user_id: null })
      expect(asKey.body.data.id).not.toBe(first.body.data.id)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("a decision whose request died before its response was stored: the retry gets the decision, not approval_not_pending", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      const run = yield* s.startRun
      const approval = yield* s.approvalOf(run.id)
      const decide = (idempotencyKey: string) =>
        Effect.flatMap(s.actorToken, (token) =>
          request("POST", `${s.sb.P}/approvals/${approval.id}/decision`, { key: s.key, idempotencyKey, body: { decision: "approve" }, headers: { "x-actor-token": token } }))
      const first = yield* decide("k-decide")
      expect(first.status, first.text).toBe(200)
      expect((yield* s.waitFor(run.id, TERMINAL)).status).toBe("succeeded")
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE idempotency_keys SET state = 'in_flight', locked_until = now() - interval '1 second', status = NULL, headers = NULL, body = NULL
                 WHERE tenant_id = ${s.sb.tenantId} AND key = 'k-decide'`.pipe(Effect.orDie)
      const retried = yield* decide("k-decide")
      expect(retried.status, retried.text).toBe(200)
      expect(retried.headers.get("idempotent-replayed")).toBeNull()
      expect(retried.body.data).toMatchObject({ id: approval.id, status: "approved", decided_by: { type: "user", id: s.user.id } })
      expect(s.host.refunds.size).toBe(1)
      // another request deciding again is still refused
      expectError(yield* decide("k-decide-2"), 409, "approval_not_pending")
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("cancel during an accepted write does not undo it: the write finishes, its result is recorded, then the run is cancelled", () =>
    Effect.gen(function*() {
      const s = yield* setup(REFUND)
      s.host.knobs.afterWrite = "slow"
      const run = yield* s.startRun
      yield* s.decide(run.id)
      yield* eventually(Effect.succeed(s.host.refunds), (r) => r.size === 1)
      const cancel = yield* s.call("POST", `/runs/${run.id}/cancel`)
      expect(cancel.status, cancel.text).toBeLessThan(300)
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("cancelled")
      const events = yield* s.eventList(run.id)
      const types = events.map((e) => e.type)
      expect(types.slice(-3)).toEqual(["run.cancel_requested", "run.tool_call.completed", "run.cancelled"])
      expect(events.find((e) => e.type === "run.tool_call.completed").data.output).toEqual([...s.host.refunds.values()][0])
      // called once, never reconciled or undone
      expect(s.host.calls.map((c) => c.path)).toEqual(["/refunds"])
      expect(s.host.refunds.size).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)
})

describe("restart", () => {
  it.live("a run waiting for approval survives a restart: recovery parks it again, and a decision after it executes the write once", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const at = { base: "", P: "", tenantId: "" }
      const host = yield* startToolHost({ jwksUrl: () => `${at.base}${at.P}/jwks.json`, issuer: ISSUER, tenantId: () => at.tenantId })
      const cellOf = (tenantId: string) =>
        Effect.map(operator("GET", `/tenants/${tenantId}/environments/sandbox/cell`), (r) => r.body)

      // the first process: the run asks for an approval, then the process stops
      const { s, runId, generation } = yield* Effect.gen(function*() {
        at.base = (yield* TestApp).baseUrl
        const s = yield* toolSandbox({
          server: (sb) => Effect.sync(() => Object.assign(at, { P: sb.P, tenantId: sb.tenantId }) && host),
          connection: connectionBody,
          steps: REFUND
        })
        const run = yield* s.startRun
        yield* s.approvalOf(run.id)
        const cell = yield* cellOf(s.sb.tenantId)
        expect(cell).toMatchObject({ running_actors: 0, parked_runs: 1 })
        return { s, runId: run.id as string, generation: cell.generation as number }
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings(), db.url)))

      // the second process on the same database
      yield* Effect.gen(function*() {
        at.base = (yield* TestApp).baseUrl
        const cell = yield* eventually(cellOf(s.sb.tenantId), (c) => c.parked_runs === 1)
        expect(cell).toMatchObject({ running_actors: 0, parked_runs: 1 })
        expect(cell.generation).toBeGreaterThan(generation)
        expect((yield* s.getRun(runId)).status).toBe("requires_action")
        yield* s.decide(runId)
        expect((yield* s.waitFor(runId, TERMINAL)).status).toBe("succeeded")
        expect(host.refunds.size).toBe(1)
        expect(host.calls.map((c) => c.path)).toEqual(["/refunds"])
        expect(host.calls[0]!.claims.cell_generation).toBe(cell.generation)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings(), db.url)))
    }).pipe(Effect.scoped), 60_000)
})

describe("approval budget (TestClock)", () => {
  it.effect("an approval nobody decides expires after 10 minutes: the run ends expired (approval_expired)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const s = yield* setup(REFUND)
        const run = yield* s.startRun
        yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
        yield* TestClock.adjust("9 minutes")
        expect((yield* s.getRun(run.id)).status).toBe("requires_action")
        const done = yield* advanceUntil("10 seconds", s.getRun(run.id), (r) => TERMINAL.includes(r.status))
        expect(done).toMatchObject({ status: "expired", status_reason: "approval_expired" })
        const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        expect(approval.status).toBe("expired")
        expect(s.host.calls).toHaveLength(0)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
    }), 60_000)
  it.effect("actor tokens live at most 5 minutes; an expired one is refused; a fresh one decides but does not extend the run", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const s = yield* setup(REFUND)
        // an assertion valid for an hour still gives a token of at most 5 minutes
        const created = yield* Clock.currentTimeMillis
        const long = yield* s.actorSession(3600)
        expect(Date.parse(long.expires_at) - created).toBeLessThanOrEqual(5 * 60 * 1000)
        expect(Date.parse(long.expires_at) - created).toBeGreaterThanOrEqual(5 * 60 * 1000 - 1000)

        const run = yield* s.startRun
        const waiting = yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
        const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        yield* TestClock.adjust("5 minutes")
        expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": long.token }), 403, "actor_token_invalid")
        const fresh = yield* s.actorSession()
        data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": fresh.token }))
        const done = yield* advanceUntil("1 second", s.getRun(run.id), (r) => TERMINAL.includes(r.status))
        expect(done.status).toBe("succeeded")
        expect(done.authorization_expires_at).toBe(waiting.authorization_expires_at)
        expect(s.host.refunds.size).toBe(1)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
    }), 60_000)

  it.effect("signing keys rotate with overlap: the old key stays published until its tokens expired, new calls use the new key", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const app = yield* TestApp
        const s = yield* setup([
          { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
          { type: "text", text: "Shipped." }
        ])
        const jwksUrl = `${app.baseUrl}${s.sb.P}/jwks.json`
        const kids = Effect.map(request("GET", `${s.sb.P}/jwks.json`), (r) => (r.body.keys as Array<any>).map((k) => k.kid as string))
        const first = yield* s.startRun
        yield* advanceUntil("1 second", s.getRun(first.id), (r) => TERMINAL.includes(r.status))
        const oldKid = s.host.calls[0]!.kid!
        expect(yield* kids).toEqual([oldKid])

        const rotated = yield* operator("POST", `/tenants/${s.sb.tenantId}/environments/sandbox/signing-keys/rotate`)
        expect(rotated.status, rotated.text).toBe(200)
        const newKid = rotated.body.kid as string
        const publishUntil = Date.parse(rotated.body.retired_publish_until)
        expect(publishUntil - (yield* Clock.currentTimeMillis)).toBe((60 + 60) * 1000)
        expect(newKid).not.toBe(oldKid)
        expect((yield* kids).sort()).toEqual([oldKid, newKid].sort())
        // a token signed before the rotation still verifies against the published set
        const oldToken = s.host.calls[0]!
        const verified = yield* Effect.promise(() =>
          jwtVerify(oldToken.token, createRemoteJWKSet(new URL(jwksUrl)), { issuer: ISSUER, currentDate: new Date(oldToken.claims.iat * 1000) })
        )
        expect(verified.protectedHeader.kid).toBe(oldKid)

        const second = yield* s.startRun
        const done = yield* advanceUntil("1 second", s.getRun(second.id), (r) => TERMINAL.includes(r.status))
        expect(done.status).toBe("succeeded")
        expect(s.host.calls[1]!.kid).toBe(newKid)
        expect(s.host.rejected).toEqual([])

        // after the token life (60 s) and the skew (60 s), only the new key is published
        yield* TestClock.setTime(publishUntil - 1000)
        expect((yield* kids).sort()).toEqual([oldKid, newKid].sort())
        yield* TestClock.setTime(publishUntil + 1000)
        expect(yield* kids).toEqual([newKid])
      }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
    }), 60_000)
  it.effect("the earliest budget wins: a second approval still pending when the run's 15 minutes of authorization end -> authorization_expired", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const s = yield* setup([
          { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
          { type: "tool_call", tool: "create_refund", input: { order_id: "o-2", amount: 7 } },
          { type: "text", text: "Refunded both." }
        ])
        const run = yield* s.startRun
        const created = Date.parse(run.created_at)
        yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
        yield* TestClock.adjust("9 minutes")
        const [first] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        data(yield* s.call("POST", `/approvals/${first.id}/decision`, { decision: "approve" }, { "x-actor-token": yield* s.actorToken }))
        // the first refund is made; the second waits for its own approval (10 min would be ~19 min in)
        yield* advanceUntil("1 second", s.call("GET", `/approvals?run_id=${run.id}&status=pending`), (r) => r.body.items.length === 1)
        expect(s.host.refunds.size).toBe(1)
        yield* TestClock.setTime(created + 15 * 60 * 1000 - 5000)
        expect((yield* s.getRun(run.id)).status).toBe("requires_action")
        const done = yield* advanceUntil("1 second", s.getRun(run.id), (r) => TERMINAL.includes(r.status), 30)
        expect(done).toMatchObject({ status: "expired", status_reason: "authorization_expired" })
        expect(Date.parse(done.completed_at)).toBeLessThanOrEqual(created + 15 * 60 * 1000 + 2000)
        const approvals = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items.map((a: any) => a.status).sort()
        expect(approvals).toEqual(["approved", "expired"])
        expect(s.host.refunds.size).toBe(1)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
    }), 60_000)
})
