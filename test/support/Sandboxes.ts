/**
 * What tests make in a sandbox, written once: the scope sets their keys get, sandboxes with a
 * second key beside the first (quickstart) one, users, an agent with its first revision, a
 * sandbox running a scripted agent, and the statuses a run ends in.
 */
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { PLATFORM_SCOPES } from "../../src/Kernel/Scopes.js"
import { createKey, provisionSandbox, request } from "./Client.js"
import { expectSingle } from "./Envelopes.js"

// ---------------------------------------------------------------------------------------------
// Scope sets

/** Every scope of the platform plane. */
export const ALL_MANAGEMENT_SCOPES = PLATFORM_SCOPES

export const AGENT_SCOPES = ["agents:read", "agents:write"]
/** What running an agent takes: conversations and runs. */
export const RUNNER_SCOPES = ["conversations:read", "conversations:write", "runs:read", "runs:write"]
/** Building agents and running them. */
export const RUN_SCOPES = [...AGENT_SCOPES, ...RUNNER_SCOPES]
export const CONNECTION_SCOPES = ["connections:read", "connections:write"]
/** A customer's server using tools: agents, runs, connections, approvals, actor sessions, users, settings, usage. */
export const TOOL_SCOPES = [
  ...RUN_SCOPES,
  ...CONNECTION_SCOPES,
  "approvals:read",
  "approvals:write",
  "actor-sessions:write",
  "users:read",
  "users:write",
  "settings:read",
  "settings:write",
  "usage:read"
]

// ---------------------------------------------------------------------------------------------
// Sandboxes and what is in them

/** A sandbox with a second key of `scopes` (`manager`, `managerId`) beside its first (quickstart) key. */
export const sandboxWithKey = (scopes: ReadonlyArray<string>, name = "manager", organization = "Acme") =>
  Effect.gen(function*() {
    const sb = yield* provisionSandbox(undefined, organization)
    const manager = yield* createKey(sb.tenantId, scopes, name)
    return { ...sb, manager: manager.secret, managerId: manager.id }
  })

/** A sandbox with a management key (all platform scopes) beside its first (quickstart) key. */
export const sandboxWithManager = (organization = "Acme") => sandboxWithKey(ALL_MANAGEMENT_SCOPES, "manager", organization)

/** Creates a user (it must succeed): `{id}`. */
export const createUser = (P: string, key: string, externalId: string) =>
  Effect.map(
    request("POST", `${P}/users`, { key, body: { external_id: externalId, display_name: `User ${externalId}` } }),
    (r) => {
      if (r.status !== 201) throw new Error(`user creation failed: ${r.status} ${r.text}`)
      return r.body.data as { id: string }
    }
  )

/** POST `body` to the users of `P`: the reply, whatever it is. */
export const postUser = (P: string, key: string, body: unknown, idempotencyKey?: string | false) =>
  request("POST", `${P}/users`, { key, body, ...(idempotencyKey !== undefined ? { idempotencyKey } : {}) })

/** A model profile on the scripted model with these steps (D12). */
export const scriptedProfile = (steps: ReadonlyArray<unknown>) => ({
  name: "s",
  provider: "scripted",
  model: "scripted-1",
  settings: { steps }
})

/** A workspace "Support", the model profile, an agent "Helper" and its first revision (each a 201). */
export const agentFixture = (
  P: string,
  key: string,
  revision: { readonly profile: unknown; readonly instructions: string; readonly tool_ids: ReadonlyArray<string> }
) =>
  Effect.gen(function*() {
    const post = (suffix: string, body: unknown) => request("POST", `${P}${suffix}`, { key, body })
    const ws = expectSingle(yield* post("/workspaces", { name: "Support" }), 201)
    const mp = expectSingle(yield* post("/model-profiles", revision.profile), 201)
    const agent = expectSingle(yield* post("/agents", { workspace_id: ws.id, name: "Helper" }), 201)
    const rev = expectSingle(
      yield* post(`/agents/${agent.id}/revisions`, {
        model_profile_id: mp.id,
        instructions: revision.instructions,
        tool_ids: revision.tool_ids
      }),
      201
    )
    return { ws, mp, agent, rev }
  })

// ---------------------------------------------------------------------------------------------
// Runs

export const TERMINAL = ["succeeded", "failed", "cancelled", "expired", "interrupted", "outcome_unknown"]
export const isTerminal = (status: string) => TERMINAL.includes(status)

/**
 * A sandbox, a manager key (`key`: agents, runs, usage, revoking keys), and a scripted revision
 * with these steps in a workspace; with helpers to converse, run and read events.
 */
export const scriptedSandbox = (steps: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function*() {
    const sb = yield* sandboxWithKey([...RUN_SCOPES, "usage:read", "keys:read", "keys:revoke"])
    const key = sb.manager
    const { agent, mp, rev, ws } = yield* agentFixture(sb.P, key, {
      profile: scriptedProfile(steps),
      instructions: "Be brief.",
      tool_ids: []
    })
    const conversation = (k = key) =>
      Effect.map(
        request("POST", `${sb.P}/conversations`, { key: k, body: { workspace_id: ws.id, agent_revision_id: rev.id } }),
        (r) => expectSingle(r, 201) as { id: string }
      )
    const startRun = (
      conversationId: string,
      text = "hi",
      options: { key?: string; headers?: Record<string, string>; idempotencyKey?: string } = {}
    ) =>
      request("POST", `${sb.P}/conversations/${conversationId}/runs`, {
        key: options.key ?? key,
        body: { input: [{ type: "text", text }] },
        ...(options.headers ? { headers: options.headers } : {}),
        ...(options.idempotencyKey ? { idempotencyKey: options.idempotencyKey } : {})
      })
    const getRun = (runId: string, k = key) => Effect.map(request("GET", `${sb.P}/runs/${runId}`, { key: k }), (r) => expectSingle(r))
    const events = (runId: string, query = "") =>
      Effect.map(request("GET", `${sb.P}/runs/${runId}/events${query}`, { key }), (r) => {
        expect(r.status, r.text).toBe(200)
        return r.body as { items: Array<any>; next_cursor: string | null }
      })
    return { ...sb, key, ws, mp, agent, rev, conversation, startRun, getRun, events }
  })
