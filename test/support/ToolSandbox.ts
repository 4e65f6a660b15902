/**
 * A sandbox wired for customer tools, shared by the end-to-end tool suites: a manager key, a tool
 * server of the test's choosing with its connection registered and reviewed, a scripted agent
 * using its tools, the tenant's identity provider, a user, and helpers to run, watch and approve.
 */
import { expect } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { exportJWK, generateKeyPair, SignJWT } from "jose"
import { TestApp } from "./App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./Client.js"
import { eventually } from "./Waiting.js"

export const TOOL_ISSUER = "https://platform.test"
export const TOOL_SCOPES = [
  "agents:read", "agents:write", "conversations:read", "conversations:write", "runs:read", "runs:write",
  "connections:read", "connections:write", "approvals:read", "approvals:write", "actor-sessions:write",
  "users:read", "users:write", "settings:read", "settings:write", "usage:read"
]
export const TERMINAL = ["succeeded", "failed", "cancelled", "expired", "interrupted", "outcome_unknown"]

/** The `data` of a single-resource reply, asserting its status. */
export const data = (res: Reply, status = 200) => {
  expect(res.status, res.text).toBe(status)
  return res.body.data
}

export interface Provisioned {
  readonly tenantId: string
  readonly P: string
  /** `{service}/v1/tenants/{t}/environments/sandbox/jwks.json` */
  readonly jwksUrl: string
}

export const toolSandbox = <S extends { readonly baseUrl: string }, R>(options: {
  /** Starts the customer's tool server for this tenant. */
  readonly server: (sb: Provisioned) => Effect.Effect<S, never, R>
  /** The connection registration body for the server's base URL. */
  readonly connection: (baseUrl: string) => unknown
  /** The scripted model's steps (D12). */
  readonly steps: ReadonlyArray<Record<string, unknown>>
}) =>
  Effect.gen(function*() {
    const app = yield* TestApp
    const sb = yield* provisionSandbox()
    const key = (yield* createKey(sb.tenantId, TOOL_SCOPES, "manager")).secret
    const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      request(method, `${sb.P}${path}`, { key, ...(body === undefined ? {} : { body }), ...(headers ? { headers } : {}) })
    const server = yield* options.server({ tenantId: sb.tenantId, P: sb.P, jwksUrl: `${app.baseUrl}${sb.P}/jwks.json` })

    const connection = data(yield* call("POST", "/connections", options.connection(server.baseUrl)), 201)
    expect(connection.status).toBe("pending_review")
    expect(connection.tool_ids).toEqual([])
    const reviewed = yield* operator("POST", `/connections/${connection.id}/review`, { decision: "approve" })
    expect(reviewed.status, reviewed.text).toBe(200)
    expect(reviewed.body.status).toBe("active")
    const tools = (yield* call("GET", `/tools?connection_id=${connection.id}`)).body.items as Array<any>

    const ws = data(yield* call("POST", "/workspaces", { name: "Support" }), 201)
    const mp = data(yield* call("POST", "/model-profiles", { name: "s", provider: "scripted", model: "scripted-1", settings: { steps: options.steps } }), 201)
    const agent = data(yield* call("POST", "/agents", { workspace_id: ws.id, name: "Helper" }), 201)
    const rev = data(yield* call("POST", `/agents/${agent.id}/revisions`, {
      model_profile_id: mp.id,
      instructions: "Help with orders.",
      tool_ids: tools.map((t) => t.id)
    }), 201)

    // the tenant's identity provider, a user, and a way to get an actor token for them
    const idp = yield* Effect.promise(() => generateKeyPair("ES256"))
    const publicJwk = { ...(yield* Effect.promise(() => exportJWK(idp.publicKey))), kid: "idp-1", alg: "ES256" }
    data(yield* call("PATCH", "/settings", { identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: { keys: [publicJwk] } } }))
    const user = data(yield* call("POST", "/users", { external_id: "u-123", display_name: "Ada" }), 201)
    /** An actor session for the user from an assertion living `seconds` (times from the service's Clock). */
    const actorSession = (seconds = 120) =>
      Effect.gen(function*() {
        const iat = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        const assertion = yield* Effect.promise(() =>
          new SignJWT({}).setProtectedHeader({ alg: "ES256", kid: "idp-1" }).setIssuer("https://idp.acme.test")
            .setAudience("agent-platform").setSubject("u-123").setIssuedAt(iat).setExpirationTime(iat + seconds).sign(idp.privateKey)
        )
        return data(yield* call("POST", "/actor-sessions", { user_id: user.id, assertion }), 201) as { token: string; expires_at: string }
      })
    const actorToken = Effect.map(actorSession(), (s) => s.token)

    const startRunWith = (headers?: Record<string, string>) =>
      Effect.gen(function*() {
        const conv = data(yield* call("POST", "/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }), 201)
        return data(yield* call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "refund order o-1" }] }, headers), 202)
      })
    const startRun = startRunWith()
    const getRun = (id: string) => Effect.map(call("GET", `/runs/${id}`), (r) => data(r))
    const eventList = (id: string) => Effect.map(call("GET", `/runs/${id}/events?limit=100`), (r) => r.body.items as Array<any>)
    const waitFor = (id: string, statuses: ReadonlyArray<string>, tries = 100) =>
      eventually(getRun(id), (r) => statuses.includes(r.status), tries)
    /** The run's (only) approval, once it is waiting for it. */
    const approvalOf = (runId: string) =>
      Effect.gen(function*() {
        expect((yield* waitFor(runId, ["requires_action", ...TERMINAL])).status).toBe("requires_action")
        const approvals = (yield* call("GET", `/approvals?run_id=${runId}`)).body.items as Array<any>
        expect(approvals).toHaveLength(1)
        return approvals[0]
      })
    /** The user's decision on the run's approval (a fresh actor token). */
    const decide = (runId: string, decision: "approve" | "deny" = "approve", reason?: string) =>
      Effect.gen(function*() {
        const approval = yield* approvalOf(runId)
        return data(yield* call("POST", `/approvals/${approval.id}/decision`, { decision, ...(reason ? { reason } : {}) }, { "x-actor-token": yield* actorToken }))
      })
    const toolEvent = (runId: string, type: string) => Effect.map(eventList(runId), (events) => events.find((e) => e.type === type))
    return { sb, key, call, server, tools, ws, rev, user, actorSession, actorToken, startRun, startRunWith, getRun, eventList, waitFor, approvalOf, decide, toolEvent }
  })
