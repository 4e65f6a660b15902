/**
 * Helpers for tests of several nodes on one database (issue 19): a request to a child node that
 * keeps the answer's headers and survives the node dying under it, a client that spreads its
 * requests round robin over the live nodes and retries what a cell move refuses, the operator's
 * cluster view, and a customer's sandbox set up over HTTP (optionally with a tool connection to a
 * ToolHost, the tenant's identity provider and a user who decides approvals).
 */
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { exportJWK, generateKeyPair, SignJWT } from "jose"
import { randomUUID } from "node:crypto"
import { OPERATOR_TOKEN } from "./App.js"
import type { ChildServer } from "./Server.js"
import { connectionBody } from "./ToolHost.js"
import { realSleep } from "./Waiting.js"

/** An answer; `status` 0 when the connection failed (the node died or is gone). */
export interface Answer {
  /** the node asked */
  readonly base: string
  readonly status: number
  readonly json: any
  readonly text: string
  readonly headers: Headers
  /** when it came back, and how long it took */
  readonly at: number
  readonly ms: number
}

/** One request to one node with a bearer token: never fails (a broken connection is status 0). */
export const send = (
  base: string,
  method: string,
  path: string,
  token: string,
  options: {
    readonly body?: unknown
    readonly idempotencyKey?: string
    readonly headers?: Record<string, string>
    /** the client gives up after this (default 60 s): status 0 */
    readonly timeoutMs?: number
  } = {}
) =>
  Effect.promise(async (): Promise<Answer> => {
    const began = Date.now()
    try {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
          ...(method !== "GET" && path.startsWith("/v1/") ? { "idempotency-key": options.idempotencyKey ?? randomUUID() } : {}),
          ...options.headers
        },
        ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
        signal: AbortSignal.timeout(options.timeoutMs ?? 60_000)
      })
      const text = await res.text()
      let json: any = undefined
      try {
        json = text === "" ? undefined : JSON.parse(text)
      } catch {
        // not JSON
      }
      return { base, status: res.status, json, text, headers: res.headers, at: Date.now(), ms: Date.now() - began }
    } catch (e) {
      const at = Date.now()
      return { base, status: 0, json: undefined, text: `connection failed: ${String(e)}`, headers: new Headers(), at, ms: at - began }
    }
  })

export const isCellUnavailable = (a: Answer) => a.status === 503 && a.json?.error?.code === "cell_unavailable"
/** 503 `database_unavailable`: a node lost its connection under the request (retried like a 503 `cell_unavailable`) */
const isDatabaseUnavailable = (a: Answer) => a.status === 503 && a.json?.error?.code === "database_unavailable"

/** What a client saw, over every request it made. */
export interface Tally {
  /** 503 `cell_unavailable` (or `database_unavailable`) answers (each retried after its Retry-After) */
  unavailable: number
  /** 503 `cell_unavailable` answers without `Retry-After: 2` */
  badRetryAfter: number
  /** connections broken under a request (the killed node's), each retried on another node */
  broken: number
  /** 429 outside the rate-limit checks */
  rateLimited: number
  /** 409 `idempotency_key_in_use` (a retry meeting its own first attempt), retried */
  inUse: number
  /** any other 5xx: `METHOD path -> status body` */
  unexpected: Array<string>
  /** every answer: when, what, how long it took, its status and RateLimit */
  readonly trace: Array<{ at: number; base?: string; what: string; ms: number; status: number; rateLimit: string | null; text: string }>
}

export const emptyTally = (): Tally => ({
  unavailable: 0,
  badRetryAfter: 0,
  broken: 0,
  rateLimited: 0,
  inUse: 0,
  unexpected: [],
  trace: []
})

/** Counts one answer into the tally; true when it is to be retried. */
export const tallyAnswer = (tally: Tally, what: string, a: Answer, allow429 = false) => {
  tally.trace.push({
    at: a.at,
    base: a.base,
    what,
    ms: a.ms,
    status: a.status,
    rateLimit: a.headers.get("ratelimit"),
    text: a.status >= 300 ? a.text.slice(0, 200) : ""
  })
  if (isCellUnavailable(a) || isDatabaseUnavailable(a)) {
    tally.unavailable++
    if (a.headers.get("retry-after") !== "2") tally.badRetryAfter++
    return true
  }
  if (a.status === 0) {
    tally.broken++
    return true
  }
  if (a.status === 409 && a.json?.error?.code === "idempotency_key_in_use") {
    tally.inUse++
    return true
  }
  if (a.status >= 500) tally.unexpected.push(`${what} -> ${a.status} ${a.text.slice(0, 300)}`)
  if (a.status === 429 && !allow429) tally.rateLimited++
  return false
}

/**
 * A client of the cluster: each logical request goes to the next live node (round robin) and is
 * retried, with the same Idempotency-Key, after 503 `cell_unavailable` (waiting its Retry-After),
 * a broken connection or 409 `idempotency_key_in_use`, for at most `patienceMs`.
 */
export const clusterClient = (live: () => ReadonlyArray<ChildServer>, tally: Tally, patienceMs = 60_000) => {
  let turn = 0
  const nextBase = () => {
    const nodes = live()
    return nodes[turn++ % nodes.length]!.baseUrl
  }
  const call = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
    Effect.gen(function*() {
      const idempotencyKey = randomUUID()
      const deadline = Date.now() + patienceMs
      while (true) {
        const a = yield* send(nextBase(), method, path, token, {
          idempotencyKey,
          ...(body !== undefined ? { body } : {}),
          ...(headers ? { headers } : {})
        })
        if (!tallyAnswer(tally, `${method} ${path}`, a) || Date.now() > deadline) return a
        const retryAfter = Number(a.headers.get("retry-after") ?? "0")
        yield* realSleep(a.status === 503 && retryAfter > 0 ? retryAfter * 1000 : 250)
      }
    })
  /** `call` that must answer `status`: its JSON (the `data` of a /v1 envelope when there is one). */
  const must = (status: number, method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
    Effect.map(call(method, path, token, body, headers), (a) => {
      if (a.status !== status) throw new Error(`${method} ${path}: expected ${status}, got ${a.status} ${a.text}`)
      return a.json?.data ?? a.json
    })
  return { call, must, nextBase }
}
export type ClusterClient = ReturnType<typeof clusterClient>

/** `GET /operator/v1/cluster` on one node (it must answer 200). */
export interface ClusterView {
  readonly runners: ReadonlyArray<{ address: string; healthy: boolean; last_heartbeat: string; self: boolean }>
  readonly cells: ReadonlyArray<{ tenant_id: string; environment: string; runner: string; generation: number; started_at: string }>
}
export const clusterView = (node: ChildServer) =>
  Effect.map(send(node.baseUrl, "GET", "/operator/v1/cluster", OPERATOR_TOKEN), (a) => {
    if (a.status !== 200) throw new Error(`GET /operator/v1/cluster on ${node.baseUrl}: ${a.status} ${a.text}`)
    return a.json as ClusterView
  })

/** Waits until the node's `/readyz` is 200 (its runner joined); returns its runner's address. */
export const readyRunner = (node: ChildServer, timeoutMs = 60_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    let last: Answer = yield* send(node.baseUrl, "GET", "/readyz", "")
    while (last.status !== 200) {
      if (Date.now() > deadline) throw new Error(`/readyz of ${node.baseUrl}: ${last.status} ${last.text}\n${node.output().slice(-3000)}`)
      yield* realSleep(200)
      last = yield* send(node.baseUrl, "GET", "/readyz", "")
    }
    const self = (yield* clusterView(node)).runners.find((r) => r.self)
    if (self === undefined) throw new Error(`${node.baseUrl} is ready but not among the runners`)
    return self.address
  })

/** Connection registrations refused because the schema check passed its deadline (sent again). */
export const schemaTimeouts = { count: 0 }

/** A customer sandbox set up over HTTP: a key, a workspace and a scripted agent's revision. */
export interface CellSetup {
  readonly tenantId: string
  readonly P: string
  readonly key: string
  readonly workspaceId: string
  readonly revisionId: string
  /** the tool connection's sandboxes: a fresh actor token of the user, who decides approvals */
  readonly actorToken?: () => Effect.Effect<string>
}

/** A sandbox tenant with a key of `scopes` (operator API), nothing in it yet. */
export const provisionTenant = (client: ClusterClient, organization: string, scopes: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const pilot = yield* client.must(201, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
      organization_name: organization,
      contact_email: "ops@cluster.test"
    })
    const { tenant_id } = yield* client.must(200, "POST", `/operator/v1/pilot-applications/${pilot.id}/approve`, OPERATOR_TOKEN)
    const key = yield* client.must(201, "POST", `/operator/v1/tenants/${tenant_id}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
      name: "cluster",
      scopes
    })
    return { tenantId: tenant_id as string, P: `/v1/tenants/${tenant_id}/environments/sandbox`, key: key.secret as string }
  })

/**
 * A sandbox running a scripted agent with these steps; with `toolHost` (its base URL, called
 * once the tenant is known) also a reviewed connection to it whose tools the agent uses, the
 * tenant's identity provider and a user, whose actor tokens decide approvals.
 */
export const provisionCell = <R = never>(
  client: ClusterClient,
  organization: string,
  scopes: ReadonlyArray<string>,
  steps: ReadonlyArray<Record<string, unknown>>,
  toolHost?: (tenant: { tenantId: string; P: string }) => Effect.Effect<string, never, R>
) =>
  Effect.gen(function*() {
    const { P, key, tenantId } = yield* provisionTenant(client, organization, scopes)
    const post = (path: string, body: unknown) => client.must(201, "POST", `${P}${path}`, key, body)
    let toolIds: Array<string> = []
    let actorToken: (() => Effect.Effect<string>) | undefined
    if (toolHost !== undefined) {
      const baseUrl = yield* toolHost({ tenantId, P })
      // A node's schema worker checks the first schemas cold: on a loaded machine that can pass
      // its 1000 ms deadline (400 `invalid_json_schema`, "took longer than"); sent again then.
      let created = yield* client.call("POST", `${P}/connections`, key, connectionBody(baseUrl))
      for (let i = 0; i < 5 && created.status === 400 && /took longer than/.test(created.json?.error?.message ?? ""); i++) {
        schemaTimeouts.count++
        created = yield* client.call("POST", `${P}/connections`, key, connectionBody(baseUrl))
      }
      if (created.status !== 201) throw new Error(`POST ${P}/connections: expected 201, got ${created.status} ${created.text}`)
      const connection = created.json.data
      yield* client.must(200, "POST", `/operator/v1/connections/${connection.id}/review`, OPERATOR_TOKEN, { decision: "approve" })
      const tools = yield* client.must(200, "GET", `${P}/tools?connection_id=${connection.id}`, key)
      toolIds = (tools.items as Array<any>).map((t) => t.id)
      expect((tools.items as Array<any>).map((t) => t.name).sort()).toEqual(["create_refund", "get_order"])

      const idp = yield* Effect.promise(() => generateKeyPair("ES256"))
      const publicJwk = { ...(yield* Effect.promise(() => exportJWK(idp.publicKey))), kid: "idp-1", alg: "ES256" }
      yield* client.must(200, "PATCH", `${P}/settings`, key, {
        identity_provider: { issuer: "https://idp.cluster.test", audience: "agent-platform", jwks: { keys: [publicJwk] } }
      })
      const user = yield* post("/users", { external_id: "u-1", display_name: "Ada" })
      actorToken = () =>
        Effect.gen(function*() {
          const iat = Math.floor(Date.now() / 1000)
          const assertion = yield* Effect.promise(() =>
            new SignJWT({ iss: "https://idp.cluster.test", aud: "agent-platform", sub: "u-1", iat, exp: iat + 120, jti: randomUUID() })
              .setProtectedHeader({ alg: "ES256", kid: "idp-1" })
              .sign(idp.privateKey)
          )
          const session = yield* post("/actor-sessions", { user_id: user.id, assertion })
          return session.token as string
        })
    }
    const ws = yield* post("/workspaces", { name: "w" })
    const mp = yield* post("/model-profiles", { name: "s", provider: "scripted", model: "scripted-1", settings: { steps } })
    const agent = yield* post("/agents", { workspace_id: ws.id, name: "a" })
    const rev = yield* post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: toolIds })
    const cell: CellSetup = {
      tenantId,
      P,
      key,
      workspaceId: ws.id,
      revisionId: rev.id,
      ...(actorToken ? { actorToken } : {})
    }
    return cell
  })
