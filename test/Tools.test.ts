/**
 * Customer tools and approvals end to end (issue 5): the real service, a real tool server on
 * 127.0.0.1 (allowlisted) verifying invocation tokens with jose against our jwks.json, a scripted
 * agent proposing the calls, and a user approving through an actor session.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, TestClock } from "effect"
import { exportJWK, generateKeyPair, SignJWT } from "jose"
import { defaultToolSettings } from "../src/Settings.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"
import { connectionBody, startToolHost } from "./support/ToolHost.js"
import { advanceUntil, eventually } from "./support/Waiting.js"

const ISSUER = "https://platform.test"
const SCOPES = [
  "agents:read", "agents:write", "conversations:read", "conversations:write", "runs:read", "runs:write",
  "connections:read", "connections:write", "approvals:read", "approvals:write", "actor-sessions:write",
  "users:read", "users:write", "settings:read", "settings:write", "usage:read"
]

const data = (res: Reply, status = 200) => {
  expect(res.status, res.text).toBe(status)
  return res.body.data
}
const expectError = (res: Reply, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.body.error.code, res.text).toBe(code)
}

const toolSettings = (overrides: Partial<typeof defaultToolSettings> = {}) => ({
  tools: {
    ...defaultToolSettings,
    issuer: Option.some(ISSUER),
    destinationAllowlist: "127.0.0.1/32",
    requestTimeoutSeconds: 2,
    reconcilePollSeconds: 1,
    ...overrides
  }
})

const TERMINAL = ["succeeded", "failed", "cancelled", "expired", "interrupted", "outcome_unknown"]

/** A sandbox with a reviewed connection to a live tool host, an identity provider and a user. */
const setup = (steps: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function*() {
    const app = yield* TestApp
    const sb = yield* provisionSandbox()
    const key = (yield* createKey(sb.tenantId, SCOPES, "manager")).secret
    const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      request(method, `${sb.P}${path}`, { key, ...(body === undefined ? {} : { body }), ...(headers ? { headers } : {}) })
    const host = yield* startToolHost({ jwksUrl: () => `${app.baseUrl}${sb.P}/jwks.json`, issuer: ISSUER, tenantId: () => sb.tenantId })

    const connection = data(yield* call("POST", "/connections", connectionBody(host.baseUrl)), 201)
    expect(connection.status).toBe("pending_review")
    expect(connection.tool_ids).toEqual([])
    const reviewed = yield* operator("POST", `/connections/${connection.id}/review`, { decision: "approve" })
    expect(reviewed.status, reviewed.text).toBe(200)
    expect(reviewed.body.status).toBe("active")
    const tools = (yield* call("GET", `/tools?connection_id=${connection.id}`)).body.items
    expect(tools.map((t: any) => t.name).sort()).toEqual(["create_refund", "get_order"])

    const ws = data(yield* call("POST", "/workspaces", { name: "Support" }), 201)
    const mp = data(yield* call("POST", "/model-profiles", { name: "s", provider: "scripted", model: "scripted-1", settings: { steps } }), 201)
    const agent = data(yield* call("POST", "/agents", { workspace_id: ws.id, name: "Helper" }), 201)
    const rev = data(yield* call("POST", `/agents/${agent.id}/revisions`, {
      model_profile_id: mp.id,
      instructions: "Help with orders.",
      tool_ids: tools.map((t: any) => t.id)
    }), 201)

    // the tenant's identity provider, a user, and a way to get an actor token for them
    const idp = yield* Effect.promise(() => generateKeyPair("ES256"))
    const publicJwk = { ...(yield* Effect.promise(() => exportJWK(idp.publicKey))), kid: "idp-1", alg: "ES256" }
    data(yield* call("PATCH", "/settings", { identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: { keys: [publicJwk] } } }))
    const user = data(yield* call("POST", "/users", { external_id: "u-123", display_name: "Ada" }), 201)
    const actorToken = Effect.gen(function*() {
      const assertion = yield* Effect.promise(() =>
        new SignJWT({}).setProtectedHeader({ alg: "ES256", kid: "idp-1" }).setIssuer("https://idp.acme.test")
          .setAudience("agent-platform").setSubject("u-123").setIssuedAt().setExpirationTime("2m").sign(idp.privateKey)
      )
      return data(yield* call("POST", "/actor-sessions", { user_id: user.id, assertion }), 201).token as string
    })

    const startRun = Effect.gen(function*() {
      const conv = data(yield* call("POST", "/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }), 201)
      return data(yield* call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "refund order o-1" }] }), 202)
    })
    const getRun = (id: string) => Effect.map(call("GET", `/runs/${id}`), (r) => data(r))
    const eventList = (id: string) => Effect.map(call("GET", `/runs/${id}/events?limit=100`), (r) => r.body.items as Array<any>)
    const waitFor = (id: string, statuses: ReadonlyArray<string>, tries = 100) =>
      eventually(getRun(id), (r) => statuses.includes(r.status), tries)
    return { sb, key, call, host, tools, rev, user, actorToken, startRun, getRun, eventList, waitFor }
  })

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
      const completed = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.completed")
      expect(completed.data.output).toEqual({ order_id: "o-1", status: "shipped", amount: 42 })
      expect(done.usage.tool_calls ?? 1).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("a write: requires_action with the exact details; a key alone cannot decide; approved, executed exactly once", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "Refunded." }
      ])
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
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }), 403, "actor_required")
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": "act_forged" }), 403, "actor_token_invalid")
      const token = yield* s.actorToken
      const decided = data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": token }))
      expect(decided).toMatchObject({ status: "approved", decided_by: { type: "user", id: s.user.id } })
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.refunds.size).toBe(1)
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      const types = (yield* s.eventList(run.id)).map((e) => e.type)
      expect(types).toEqual(["run.queued", "run.started", "run.message", "run.requires_action", "run.approval.decided", "run.tool_call.started", "run.tool_call.completed", "run.message", "run.succeeded"])
      const started = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.started")
      expect(s.host.calls[0]!.operationId).toBe(started.data.operation_id)
      expectError(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "deny" }, { "x-actor-token": token }), 409, "approval_not_pending")
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("a denied write is never called; the agent gets a denied result and the run continues", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "Okay, no refund." }
      ])
      const run = yield* s.startRun
      yield* s.waitFor(run.id, ["requires_action"])
      const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
      const token = yield* s.actorToken
      data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "deny", reason: "not eligible" }, { "x-actor-token": token }))
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.calls).toHaveLength(0)
      const failed = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.failed")
      expect(failed.data.error).toMatchObject({ type: "denied", reason: "not eligible" })
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("an ambiguous write (500 after commit) is reconciled, never replayed: succeeded continues with its output", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "Refunded." }
      ])
      s.host.knobs.afterWrite = "500"
      const run = yield* s.startRun
      yield* s.waitFor(run.id, ["requires_action"])
      const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
      data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": yield* s.actorToken }))
      const done = yield* s.waitFor(run.id, TERMINAL)
      expect(done.status).toBe("succeeded")
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
      expect(s.host.calls.filter((c) => c.path.startsWith("/refunds/operations/"))).toHaveLength(1)
      const completed = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.completed")
      expect(completed.data.output).toEqual([...s.host.refunds.values()][0])
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("an ambiguous write the customer never applied: not_found is a tool failure the agent sees", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "The refund did not go through." }
      ])
      s.host.knobs.afterWrite = "500"
      const run = yield* s.startRun
      yield* s.waitFor(run.id, ["requires_action"])
      const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
      // the "commit" is lost: reconciliation will not find the operation
      const clear = setInterval(() => s.host.refunds.clear(), 5)
      data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": yield* s.actorToken }))
      const done = yield* s.waitFor(run.id, TERMINAL)
      clearInterval(clear)
      expect(done.status).toBe("succeeded")
      const failed = (yield* s.eventList(run.id)).find((e) => e.type === "run.tool_call.failed")
      expect(failed.data.error.type).toBe("write_not_applied")
      expect(s.host.calls.filter((c) => c.path === "/refunds")).toHaveLength(1)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)

  it.live("no answer and no reconciliation: outcome_unknown (never rerun); a later reconciliation adds run.reconciled", () =>
    Effect.gen(function*() {
      const s = yield* setup([
        { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
        { type: "text", text: "Refunded." }
      ])
      s.host.knobs.afterWrite = "hang"
      s.host.knobs.reconciliation = "500"
      const run = yield* s.startRun
      yield* s.waitFor(run.id, ["requires_action"])
      const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
      data(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": yield* s.actorToken }))
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

describe("approval budget (TestClock)", () => {
  it.effect("an approval nobody decides expires after 10 minutes: the run ends expired (approval_expired)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const s = yield* setup([
          { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
          { type: "text", text: "Refunded." }
        ])
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
})
