/**
 * A sandbox wired for customer tools, shared by the end-to-end tool suites: a manager key, a tool
 * server of the test's choosing with its connection registered and reviewed, a scripted agent
 * using its tools, the tenant's identity provider, a user, and helpers to run, watch and approve;
 * the tool settings of those suites, and the sandbox on a live test tool host.
 */
import { expect } from "@effect/vitest"
import { Clock, Effect, Option } from "effect"
import { exportJWK, generateKeyPair, SignJWT } from "jose"
import { randomUUID } from "node:crypto"
import { defaultToolConfig } from "../../src/Config/AppConfig.js"
import { TestApp } from "./App.js"
import { operator, request } from "./Client.js"
import { expectSingle } from "./Envelopes.js"
import { agentFixture, sandboxWithKey, scriptedProfile, TERMINAL, TOOL_SCOPES } from "./Sandboxes.js"
import { connectionBody, startToolHost } from "./ToolHost.js"
import { eventually } from "./Waiting.js"

export const TOOL_ISSUER = "https://platform.test"

/** The app's tool settings for these suites: our issuer, 127.0.0.1 allowlisted, short timeouts. */
export const toolSettings = (overrides: Partial<typeof defaultToolConfig> = {}) => ({
  tools: {
    ...defaultToolConfig,
    issuer: Option.some(TOOL_ISSUER),
    destinationAllowlist: "127.0.0.1/32",
    requestTimeoutSeconds: 2,
    reconcilePollSeconds: 1,
    ...overrides
  }
})

/** The agent proposes a refund, then says it is done. */
export const REFUND = [
  { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
  { type: "text", text: "Refunded." }
]

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
    const sb = yield* sandboxWithKey(TOOL_SCOPES)
    const key = sb.manager
    const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
      request(method, `${sb.P}${path}`, { key, ...(body === undefined ? {} : { body }), ...(headers ? { headers } : {}) })
    const server = yield* options.server({ tenantId: sb.tenantId, P: sb.P, jwksUrl: `${app.baseUrl}${sb.P}/jwks.json` })

    const connection = expectSingle(yield* call("POST", "/connections", options.connection(server.baseUrl)), 201)
    expect(connection.status).toBe("pending_review")
    expect(connection.tool_ids).toEqual([])
    const reviewed = yield* operator("POST", `/connections/${connection.id}/review`, { decision: "approve" })
    expect(reviewed.status, reviewed.text).toBe(200)
    expect(reviewed.body.status).toBe("active")
    const tools = (yield* call("GET", `/tools?connection_id=${connection.id}`)).body.items as Array<any>

    const { rev, ws } = yield* agentFixture(sb.P, key, {
      profile: scriptedProfile(options.steps),
      instructions: "Help with orders.",
      tool_ids: tools.map((t) => t.id)
    })

    // the tenant's identity provider, a user, and a way to get an actor token for them
    const idp = yield* Effect.promise(() => generateKeyPair("ES256"))
    const publicJwk = { ...(yield* Effect.promise(() => exportJWK(idp.publicKey))), kid: "idp-1", alg: "ES256" }
    expectSingle(
      yield* call("PATCH", "/settings", {
        identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: { keys: [publicJwk] } }
      })
    )
    const user = expectSingle(yield* call("POST", "/users", { external_id: "u-123", display_name: "Ada" }), 201)
    /**
     * The provider's assertion for the user, issued now (the service's Clock) with a fresh `jti` and
     * living `seconds`; `claims` replaces any claim, or leaves it out when undefined.
     */
    const assertion = (seconds = 120, claims: Record<string, unknown> = {}) =>
      Effect.gen(function*() {
        const iat = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        const all: Record<string, unknown> = {
          iss: "https://idp.acme.test",
          aud: "agent-platform",
          sub: "u-123",
          iat,
          exp: iat + seconds,
          jti: `jti-${randomUUID()}`,
          ...claims
        }
        const payload = Object.fromEntries(Object.entries(all).filter(([, value]) => value !== undefined))
        return yield* Effect.promise(() => new SignJWT(payload).setProtectedHeader({ alg: "ES256", kid: "idp-1" }).sign(idp.privateKey))
      })
    /** `POST /actor-sessions` for the user with this assertion: the reply, whatever it is. */
    const postSession = (signed: string, k = key) =>
      request("POST", `${sb.P}/actor-sessions`, { key: k, body: { user_id: user.id, assertion: signed } })
    /** An actor session for the user from an assertion living `seconds`. */
    const actorSession = (seconds = 120) =>
      Effect.gen(function*() {
        return expectSingle(yield* postSession(yield* assertion(seconds)), 201) as { token: string; expires_at: string }
      })
    const actorToken = Effect.map(actorSession(), (s) => s.token)

    const startRunWith = (headers?: Record<string, string>) =>
      Effect.gen(function*() {
        const conv = expectSingle(yield* call("POST", "/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }), 201)
        return expectSingle(
          yield* call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "refund order o-1" }] }, headers),
          202
        )
      })
    const startRun = startRunWith()
    const getRun = (id: string) => Effect.map(call("GET", `/runs/${id}`), (r) => expectSingle(r))
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
        return expectSingle(
          yield* call("POST", `/approvals/${approval.id}/decision`, { decision, ...(reason ? { reason } : {}) }, {
            "x-actor-token": yield* actorToken
          })
        )
      })
    const toolEvent = (runId: string, type: string) => Effect.map(eventList(runId), (events) => events.find((e) => e.type === type))
    return {
      sb,
      key,
      call,
      server,
      tools,
      ws,
      rev,
      user,
      /** the identity provider's public key, as the environment's inline `jwks` holds it */
      publicJwk,
      assertion,
      postSession,
      actorSession,
      actorToken,
      startRun,
      startRunWith,
      getRun,
      eventList,
      waitFor,
      approvalOf,
      decide,
      toolEvent
    }
  })

/** A sandbox with a reviewed connection to a live tool host (`host`), an identity provider and a user. */
export const toolHostSandbox = (steps: ReadonlyArray<Record<string, unknown>>) =>
  Effect.map(
    toolSandbox({
      server: (sb) => startToolHost({ jwksUrl: () => sb.jwksUrl, issuer: TOOL_ISSUER, tenantId: () => sb.tenantId }),
      connection: connectionBody,
      steps
    }),
    (s) => {
      expect(s.tools.map((t) => t.name).sort()).toEqual(["create_refund", "get_order"])
      return { ...s, host: s.server }
    }
  )
