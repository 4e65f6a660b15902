/**
 * Every `/v1` operation under generated input (D19, D3, D5, D6; issue 14), as properties: the
 * operations are read from the HttpApi definition (`Api`), so one added later is covered without
 * editing this file. For each, fast-check generates valid requests (Effect Schema arbitraries of
 * its payload, query and headers, with the sandbox's real ids, random ids or another tenant's) and
 * hostile ones (wrong types, unknown fields at any depth, U+0000, control characters, lone
 * surrogates, invalid UTF-8, huge numbers, deep nesting, random JSON, non-JSON text, bad paths,
 * queries, keys and Idempotency-Keys), and asserts of every answer:
 *   - never a 5xx, and every 4xx is the D3 envelope;
 *   - the answer D19/D5/D6/D3 promise where the input alone decides it (e.g. U+0000 in a body:
 *     400 invalid_request; an unknown field: 400 unknown_parameter naming it; another tenant's id: 404);
 *   - a refused mutation changed nothing: every row of every table of the tenants involved
 *     (contents, not only counts) and their idempotency records. A 404, 409 or 410 that passed the
 *     idempotency gate is stored by design (src/Edge/Idempotency.ts `isStored`, D5): then exactly
 *     that one record is new, and nothing else. Its audit entry (D16) is the one row it adds: at
 *     most one, with its request id and status (none only for a 401 naming no environment).
 * Deleting the environment or the tenant runs against a sandbox of its own. A failing case is
 * shrunk by fast-check and printed (method, path, query, headers, body, answer).
 */
import { HttpApi, HttpApiSchema } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, expect, layer } from "@effect/vitest"
import { Arbitrary, Context, Effect, FastCheck as fc, Layer, Option, Runtime, Schema, SchemaAST } from "effect"
import * as http from "node:http"

import { Api } from "../src/Api.js"
import { defaultEdgeConfig } from "../src/Config/AppConfig.js"
import { ALL_SCOPES } from "../src/Kernel/Scopes.js"
import { RequiredScopes } from "../src/Kernel/Security.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"
import { expectCommonHeaders, expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { agentFixture, createUser, isTerminal, scriptedProfile } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { eventually } from "./support/Waiting.js"

const UNLIMITED = { ratePerSecond: 100_000, burst: 100_000 }
// Generated cases per operation (CI's budget; the refusal rules are per field, so a few dozen cover
// each operation's fields). PROPERTY_RUNS_SCALE=4 (say) runs a deeper search.
const SCALE = Number(process.env.PROPERTY_RUNS_SCALE ?? 1)
const NUM_RUNS = { mutation: Math.ceil(24 * SCALE), read: Math.ceil(12 * SCALE) }

// ---------------------------------------------------------------------------------------------
// The operations, from the HttpApi definition

interface Operation {
  readonly name: string
  readonly method: string
  readonly path: string
  readonly params: ReadonlyArray<string>
  readonly payload: Schema.Schema<any, any> | undefined
  readonly query: Schema.Schema<any, any> | undefined
  readonly headers: Schema.Schema<any, any> | undefined
  /** needs a key (the public key set does not) */
  readonly secured: boolean
}
const everyOperation: Array<Operation> = []
HttpApi.reflect(Api, {
  onGroup: () => undefined,
  onEndpoint: ({ endpoint }) =>
    everyOperation.push({
      name: endpoint.name,
      method: endpoint.method,
      path: endpoint.path,
      params: endpoint.path.split("/").filter((s) => s.startsWith(":")).map((s) => s.slice(1)),
      payload: Option.getOrUndefined(endpoint.payloadSchema) as Schema.Schema<any, any> | undefined,
      query: Option.getOrUndefined(endpoint.urlParamsSchema) as Schema.Schema<any, any> | undefined,
      headers: Option.getOrUndefined(endpoint.headersSchema) as Schema.Schema<any, any> | undefined,
      secured: Option.isSome(Context.getOption(endpoint.annotations, RequiredScopes))
    })
})
/** `/operator/v1` and unversioned paths (healthz, readyz) are not the public API. */
const OPERATIONS = everyOperation.filter((op) => op.path.startsWith("/v1/"))
const isMutation = (op: Operation) => op.method !== "GET" && op.method !== "HEAD"
/** Deleting the cell itself (tenant, environment): run against a sandbox of its own. */
const isCellDeletion = (op: Operation) => op.method === "DELETE" && /\/:(tenant_id|environment)$/.test(op.path)

// ---------------------------------------------------------------------------------------------
// What the server promises of input (D19), as the test's own oracle

/** What a JSON string may not hold (D19): C0 but tab, LF, CR; a lone surrogate. */
const FORBIDDEN_IN_TEXT = /[\u0000-\u0008\u000B\u000C\u000E-\u001F]|\p{Cs}/u
/** What a path segment or query part may not hold: any control character, or a lone surrogate. */
const FORBIDDEN_IN_LINE = /[\u0000-\u001F\u007F-\u009F]|\p{Cs}/u

const hasForbiddenText = (v: unknown): boolean =>
  typeof v === "string"
    ? FORBIDDEN_IN_TEXT.test(v)
    : Array.isArray(v)
    ? v.some(hasForbiddenText)
    : v !== null && typeof v === "object"
    ? Object.entries(v).some(([k, x]) => FORBIDDEN_IN_TEXT.test(k) || hasForbiddenText(x))
    : false

/** A URL part the edge refuses (malformed escape, control character): 400 (or 404 for a path id). */
const refusedInUrl = (encoded: string) => {
  try {
    return FORBIDDEN_IN_LINE.test(decodeURIComponent(encoded.replace(/\+/g, " ")))
  } catch {
    return true
  }
}

const depthOf = (text: string) => {
  let depth = 0, max = 0, inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      if (c === "\\") i++
      else if (c === "\"") inString = false
    } else if (c === "\"") inString = true
    else if (c === "{" || c === "[") max = Math.max(max, ++depth)
    else if (c === "}" || c === "]") depth--
  }
  return max
}

/** Whether a value of this (encoded) schema can be `v`: false when it certainly cannot. */
const accepts = (ast: SchemaAST.AST, v: unknown): boolean | undefined => {
  switch (ast._tag) {
    case "StringKeyword":
      return typeof v === "string"
    case "NumberKeyword":
      return typeof v === "number"
    case "BooleanKeyword":
      return typeof v === "boolean"
    case "Literal":
      return v === ast.literal
    case "UndefinedKeyword":
      return v === undefined
    case "UnknownKeyword":
    case "AnyKeyword":
      return true
    case "Enums":
      return ast.enums.some(([, e]) => e === v)
    case "Union": {
      const all = ast.types.map((t) => accepts(t, v))
      return all.includes(true) ? true : all.every((r) => r === false) ? false : undefined
    }
    case "Refinement":
      return accepts(ast.from, v) === false ? false : undefined
    case "Transformation":
      return accepts(ast.from, v)
    case "Suspend":
      return accepts(ast.f(), v)
    case "TupleType":
      return Array.isArray(v) ? undefined : false
    case "TypeLiteral": {
      if (v === null || typeof v !== "object" || Array.isArray(v)) return false
      for (const ps of ast.propertySignatures) {
        const has = Object.prototype.hasOwnProperty.call(v, ps.name)
        if ((!has && !ps.isOptional) || (has && accepts(ps.type, (v as any)[ps.name]) === false)) return false
      }
      return undefined
    }
    default:
      return undefined
  }
}

/** The schema of the value at `path` in `root` (undefined where a union leaves it open). */
const schemaAt = (ast: SchemaAST.AST, root: unknown, path: ReadonlyArray<string | number>): SchemaAST.AST | undefined => {
  if (ast._tag === "Refinement" || ast._tag === "Transformation") return schemaAt(ast.from, root, path)
  if (ast._tag === "Suspend") return schemaAt(ast.f(), root, path)
  if (ast._tag === "Union") {
    const fits = ast.types.filter((t) => accepts(t, root) !== false)
    return fits.length === 1 ? schemaAt(fits[0]!, root, path) : undefined
  }
  if (path.length === 0) return ast
  const [head, ...rest] = path
  const next = (root as any)[head!]
  if (ast._tag === "TypeLiteral" && typeof head === "string") {
    const ps = ast.propertySignatures.find((p) => p.name === head)
    return ps && schemaAt(ps.type, next, rest)
  }
  if (ast._tag === "TupleType" && typeof head === "number") {
    const element = ast.elements[head]?.type ?? ast.rest[0]?.type
    return element && schemaAt(element, next, rest)
  }
  return undefined
}
const isClosedStruct = (ast: SchemaAST.AST | undefined) => ast?._tag === "TypeLiteral" && ast.indexSignatures.length === 0

/** Paths of the nested objects (not the root) and of the string leaves of a JSON value. */
const pathsOf = (
  v: unknown,
  at: Array<string | number> = [],
  out = { objects: [] as Array<Array<string | number>>, strings: [] as Array<Array<string | number>> }
) => {
  if (typeof v === "string") out.strings.push(at)
  else if (Array.isArray(v)) v.forEach((x, i) => pathsOf(x, [...at, i], out))
  else if (v !== null && typeof v === "object") {
    if (at.length > 0) out.objects.push(at)
    for (const [k, x] of Object.entries(v)) pathsOf(x, [...at, k], out)
  }
  return out
}
const setAt = (root: any, path: ReadonlyArray<string | number>, value: unknown): any => {
  if (path.length === 0) return value
  const copy = Array.isArray(root) ? [...root] : { ...root }
  copy[path[0]!] = setAt(root[path[0]!], path.slice(1), value)
  return copy
}
const getAt = (root: any, path: ReadonlyArray<string | number>): any => path.reduce((v, k) => v?.[k], root)

// ---------------------------------------------------------------------------------------------
// Requests: exact bytes over node:http (no client-side URL normalisation), SSE read to the headers

interface Case {
  readonly mode: string
  readonly method: string
  readonly path: string
  readonly query: string
  readonly headers: Record<string, string>
  readonly body?: string | Buffer | undefined
  /** what the input alone decides (checked when set) */
  readonly expected?: { readonly statuses: ReadonlyArray<number>; readonly code?: string; readonly param?: string }
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
const send = (port: number, c: Case) =>
  new Promise<Reply>((resolve, reject) => {
    const headers: Record<string, string | number> = { ...c.headers }
    if (c.body !== undefined) headers["content-length"] = Buffer.byteLength(c.body)
    const req = http.request({ host: "127.0.0.1", port, method: c.method, path: c.path + c.query, headers, agent }, (res) => {
      const reply = (text: string): Reply => {
        const h = new Headers()
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v)
        let body: any
        try {
          body = JSON.parse(text)
        } catch {
          body = undefined
        }
        return { status: res.statusCode ?? 0, headers: h, body, text }
      }
      if (String(res.headers["content-type"]).startsWith("text/event-stream")) {
        res.destroy() // a stream: its status and headers are the answer
        return resolve(reply(""))
      }
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("end", () => resolve(reply(Buffer.concat(chunks).toString("utf8"))))
      res.on("error", reject)
    })
    req.setTimeout(20_000, () => req.destroy(new Error("no answer within 20 s")))
    req.on("error", reject)
    req.end(c.body)
  })

const show = (s: string | Buffer | undefined, max = 600) => {
  if (s === undefined) return "(none)"
  const text = typeof s === "string" ? JSON.stringify(s) : `bytes ${s.toString("hex")}`
  return text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text
}
const describeCase = (c: Case, res?: Reply) =>
  `[${c.mode}] ${c.method} ${show(c.path + c.query, 400)}\n  headers: ${
    JSON.stringify({ ...c.headers, authorization: c.headers["authorization"] ? "…" : undefined })
  }` +
  `\n  body: ${show(c.body)}` + (res ? `\n  -> ${res.status} ${show(res.text, 400)}` : "")

// ---------------------------------------------------------------------------------------------
// The tenants' rows, for "a refused mutation changed nothing"

const OPEN_RUNS = "('queued','running','requires_action','cancel_requested')"
const lit = (s: string) => `'${s.replace(/'/g, "''")}'`
const digest = "count(*)::int AS n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS d"

const snapshots = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const tables = (yield* sql<{ table_name: string }>`
    SELECT DISTINCT table_name FROM information_schema.columns
    WHERE column_name = 'tenant_id' AND table_schema = current_schema() AND table_name NOT IN ('idempotency_keys', 'audit_entries')
    ORDER BY table_name`.pipe(Effect.orDie)).map((r) => r.table_name)
  expect(tables.length).toBeGreaterThan(15)
  const rows = (tenants: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const ids = `(${tenants.map(lit).join(",")})`
      const query = [
        ...tables.map((t) => `SELECT '${t}' AS t, ${digest} FROM "${t}" x WHERE tenant_id IN ${ids}`),
        `SELECT 'tenants' AS t, ${digest} FROM tenants x WHERE id IN ${ids}`,
        `SELECT 'run_events' AS t, ${digest} FROM run_events x JOIN runs r ON r.id = x.run_id WHERE r.tenant_id IN ${ids}`,
        `SELECT 'conversation_items' AS t, ${digest} FROM conversation_items x
           JOIN conversations c ON c.id = x.conversation_id WHERE c.tenant_id IN ${ids}`
      ].join(" UNION ALL ")
      const result = yield* sql.unsafe<{ t: string; n: number; d: string }>(query).pipe(Effect.orDie)
      return Object.fromEntries(result.map((r) => [r.t, `${r.n} rows, md5 ${r.d}`]))
    })
  /** The idempotency records of the tenants, leaving out those of `key`, and how many `key` has. */
  const idempotency = (tenants: ReadonlyArray<string>, key: string) =>
    Effect.map(
      sql.unsafe<{ n: number; d: string; mine: number }>(
        `SELECT ${digest}, (SELECT count(*)::int FROM idempotency_keys WHERE key = ${lit(key)}) AS mine
         FROM idempotency_keys x WHERE tenant_id IN (${tenants.map(lit).join(",")}) AND key <> ${lit(key)}`
      ).pipe(Effect.orDie),
      ([r]) => ({ others: `${r!.n} rows, md5 ${r!.d}`, mine: r!.mine })
    )
  /** The tenants' audit entries: a digest of those up to `last` (all, without it), and the newest id. */
  const audit = (tenants: ReadonlyArray<string>, last?: string) =>
    Effect.map(
      sql.unsafe<{ n: number; d: string; last: string | null }>(
        `SELECT ${digest}, max(id) AS last FROM audit_entries x WHERE tenant_id IN (${tenants.map(lit).join(",")})
         ${last === undefined ? "" : `AND id <= ${lit(last)}`}`
      ).pipe(Effect.orDie),
      ([r]) => ({ rows: `${r!.n} rows, md5 ${r!.d}`, last: r!.last ?? "" })
    )
  /** The tenants' audit entries written after `last`. */
  const auditSince = (tenants: ReadonlyArray<string>, last: string) =>
    sql.unsafe<{ request_id: string; status: number }>(
      `SELECT request_id, status FROM audit_entries WHERE tenant_id IN (${tenants.map(lit).join(",")}) AND id > ${lit(last)}`
    ).pipe(Effect.orDie)
  /** Waits until no run of the tenants is open (a run's own writes are not a request's). */
  const quiet = (tenants: ReadonlyArray<string>) =>
    eventually(
      Effect.map(
        sql.unsafe<{ n: number }>(
          `SELECT count(*)::int AS n FROM runs WHERE status IN ${OPEN_RUNS} AND tenant_id IN (${tenants.map(lit).join(",")})`
        ).pipe(Effect.orDie),
        ([r]) => r!.n
      ),
      (n) => n === 0,
      100
    )
  return { rows, idempotency, audit, auditSince, quiet }
})

// ---------------------------------------------------------------------------------------------
// The sandboxes: A (all scopes, one of everything), B (another tenant: its ids are foreign to A)

type Pool = Record<string, ReadonlyArray<string>>
interface Cell {
  readonly tenantId: string
  readonly key: string
  readonly ids: Pool
}
class Sandboxes extends Context.Tag("Sandboxes")<Sandboxes, { readonly a: Cell; readonly b: Cell }>() {}

const created = (r: Reply, status = 201) => expectSingle(r, status).id as string

const populate = (organization: string, full: boolean) =>
  Effect.gen(function*() {
    const sb = yield* provisionSandbox(ALL_SCOPES, organization)
    const post = (suffix: string, body?: unknown) => request("POST", `${sb.P}${suffix}`, { key: sb.key, body })
    const { agent, mp, rev, ws } = yield* agentFixture(sb.P, sb.key, {
      profile: scriptedProfile([{ type: "text", text: "ok" }]),
      instructions: "Be brief.",
      tool_ids: []
    })
    const users = [yield* createUser(sb.P, sb.key, `u1-${organization}`), yield* createUser(sb.P, sb.key, `u2-${organization}`)]
    const actor = created(yield* post("/service-actors", { name: "svc" }))
    const conversation = created(yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }))
    const run = expectSingle(yield* post(`/conversations/${conversation}/runs`, { input: [{ type: "text", text: "hi" }] }), 202).id
    yield* eventually(request("GET", `${sb.P}/runs/${run}`, { key: sb.key }), (r) => isTerminal(r.body?.data?.status))
    const ids: Record<string, Array<string>> = {
      user_id: users.map((u) => u.id),
      service_actor_id: [actor],
      workspace_id: [ws.id],
      model_profile_id: [mp.id],
      agent_id: [agent.id],
      revision_id: [rev.id],
      conversation_id: [conversation],
      run_id: [run],
      key_id: [sb.keyId]
    }
    if (full) {
      // keys that may be revoked (never the one the tests use), a deletion job, a connection and its tools
      ids.key_id = [
        (yield* createKey(sb.tenantId, ["users:read"], "spare-1")).id,
        (yield* createKey(sb.tenantId, ["users:read"], "spare-2")).id
      ]
      const gone = yield* createUser(sb.P, sb.key, "to-delete")
      ids.deletion_job_id = [expectSingle(yield* request("DELETE", `${sb.P}/users/${gone.id}`, { key: sb.key }), 202).id]
      const connection = yield* post("/connections", connectionBody("https://tools.example.com"))
      if (connection.status === 201) {
        ids.connection_id = [connection.body.data.id]
        yield* operator("POST", `/connections/${connection.body.data.id}/review`, { decision: "approve" })
        const tools = yield* request("GET", `${sb.P}/tools?connection_id=${connection.body.data.id}`, { key: sb.key })
        ids.tool_id = (tools.body?.items ?? []).map((t: any) => t.id)
      }
    }
    return { tenantId: sb.tenantId, key: sb.key, ids } satisfies Cell
  })

/** A sandbox of its own (no resources): the target of deleting the environment or the tenant. */
const bareCell = Effect.gen(function*() {
  const sb = yield* provisionSandbox(ALL_SCOPES, "Doomed")
  expect((yield* request("GET", `${sb.P}/users`, { key: sb.key })).status).toBe(200) // its cell is started
  return { tenantId: sb.tenantId, key: sb.key, ids: {} } satisfies Cell
})

const Env = Layer.effect(
  Sandboxes,
  Effect.all({ a: populate("Acme", true), b: populate("Other", false) })
).pipe(
  Layer.provideMerge(makeTestApp({ rateLimit: UNLIMITED, edge: { ...defaultEdgeConfig, clientRateLimit: UNLIMITED } }))
)

// ---------------------------------------------------------------------------------------------
// Arbitraries

/** Body fields that hold an id of the pool named by the value. */
const BODY_IDS: Record<string, string> = {
  workspace_id: "workspace_id",
  agent_revision_id: "revision_id",
  model_profile_id: "model_profile_id",
  user_id: "user_id",
  run_id: "run_id",
  connection_id: "connection_id",
  tool_ids: "tool_id"
}

const NASTY = [
  "\u0000",
  "a\u0000b",
  "\u0001",
  "\u0007",
  "\u001b[31m",
  "\t",
  "\n",
  "\r\n",
  "\u007f",
  "\u0085",
  "\u2028",
  "\ud800",
  "\udc00x",
  "\ufeff",
  "\u200b",
  "𝕏",
  "ü",
  "\\",
  "\"",
  "'; DROP TABLE users; --",
  "%",
  "%00",
  "../..",
  "${x}",
  "<script>",
  "__proto__",
  " ",
  ""
]
const nastyString = fc.oneof(
  fc.constantFrom(...NASTY),
  fc.array(fc.constantFrom(...NASTY, "a", "Z"), { minLength: 1, maxLength: 6 }).map((a) => a.join("")),
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.integer({ min: 129, max: 150_000 }).map((n) => "x".repeat(n))
)

/** encodeURIComponent, with lone surrogates written as their (invalid) 3-byte sequences. */
const encodeSegment = (s: string) =>
  Array.from(s).map((ch) => {
    const u = ch.charCodeAt(0)
    if (ch.length === 1 && u >= 0xd800 && u <= 0xdfff) {
      return [0xe0 | (u >> 12), 0x80 | ((u >> 6) & 63), 0x80 | (u & 63)].map((b) => `%${b.toString(16).toUpperCase()}`).join("")
    }
    return encodeURIComponent(ch)
  }).join("")

const randomId = fc.stringMatching(/^[a-z]{2,4}_[0-9A-Za-z]{4,30}$/)
const hostileSegment = fc.oneof(
  nastyString.filter((s) => s.length > 0 && s.length <= 6_000).map(encodeSegment),
  fc.constantFrom("%00", "a%00b", "%zz", "%", "%ff", "%ED%A0%80", "%C0%80", "%2F", "a%2Fb", "%2e%2e", "..", ".", "%E2%80%A8", "%7F"),
  fc.integer({ min: 129, max: 6_000 }).map((n) => "y".repeat(n)),
  fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }).map(encodeSegment)
)

const queryString = (pairs: ReadonlyArray<readonly [string, string]>) =>
  pairs.length === 0 ? "" : `?${pairs.map(([k, v]) => `${encodeSegment(k)}=${encodeSegment(v)}`).join("&")}`
const keysOfStruct = (s: Schema.Schema.Any | undefined) => {
  const ast = s && SchemaAST.encodedAST(s.ast)
  return ast?._tag === "TypeLiteral" ? ast.propertySignatures.map((p) => String(p.name)) : []
}

let counter = 0
const freshKey = () => `prop-${Date.now()}-${++counter}`

const wrongValues = [0, -1, 1.5, true, false, null, "s", "", [], [1, "a"], {}, { a: 1 }]
const hugeNumbers = [
  "1e400",
  "-1e400",
  "123456789012345678901234567890123456789",
  "1e308",
  "-0",
  "0.000000000000000000000000000001",
  "9007199254740993"
]
const nest = (depth: number) => "[".repeat(depth - 1) + "{}" + "]".repeat(depth - 1)

/** One part of a multipart/form-data body: a field, or a file when it has a filename. */
interface Part {
  readonly name: string
  readonly filename?: string
  readonly type?: string
  readonly data: Buffer
}

/** A multipart/form-data body of these parts, with its Content-Type (boundary). */
const multipart = (parts: ReadonlyArray<Part>) => {
  const boundary = `----property${++counter}`
  const chunks: Array<Buffer> = []
  for (const part of parts) {
    const disposition = `form-data; name="${part.name}"${part.filename === undefined ? "" : `; filename="${part.filename}"`}`
    const type = part.type === undefined ? "" : `Content-Type: ${part.type}\r\n`
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`), part.data, Buffer.from("\r\n"))
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`))
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` }
}

/**
 * The cases of one operation against cell `own` (its real ids), `foreign` (another tenant).
 */
const casesOf = (op: Operation, own: Cell, foreign: Cell) => {
  const pool = (name: string) => own.ids[name] ?? []
  const cellParam = (name: string) => (name === "tenant_id" ? own.tenantId : name === "environment" ? "sandbox" : undefined)
  /** Our cell, and for each resource a real id (when there is one) or a random one. */
  const cleanParams = fc.record(Object.fromEntries(op.params.map((name) => {
    const cell = cellParam(name)
    if (cell !== undefined) return [name, fc.constant(cell)]
    const real = pool(name)
    return [name, real.length > 0 ? fc.oneof({ arbitrary: fc.constantFrom(...real), weight: 3 }, randomId) : randomId]
  }))) as fc.Arbitrary<Record<string, string>>
  const pathOf = (params: Record<string, string>) => op.path.replace(/:([a-z_]+)/g, (_, name: string) => params[name]!)
  const auth: Record<string, string> = { authorization: `Bearer ${own.key}` }

  const payloadAst = op.payload && SchemaAST.encodedAST(op.payload.ast)
  const propType = (key: string) =>
    payloadAst?._tag === "TypeLiteral" ? payloadAst.propertySignatures.find((p) => p.name === key)?.type : undefined
  const closedPayload = isClosedStruct(payloadAst)
  /** A valid body (the schema's arbitrary, encoded), its id fields now and then real ids. */
  const isUpload = op.payload !== undefined && HttpApiSchema.getMultipart(op.payload.ast) !== undefined
  const validBody: fc.Arbitrary<any> = op.payload && !isUpload
    ? fc.tuple(Arbitrary.make(op.payload).map((v) => Schema.encodeSync(op.payload as Schema.Schema<any, any>)(v)), fc.boolean(), fc.nat())
      .map(([body, real, pick]) => {
        if (!real || body === null || typeof body !== "object") return body
        const out: Record<string, unknown> = { ...body }
        for (const [field, name] of Object.entries(BODY_IDS)) {
          const ids = pool(name)
          if (!(field in out) || ids.length === 0) continue
          out[field] = Array.isArray(out[field]) ? ids.slice(0, 1 + (pick % ids.length)) : ids[pick % ids.length]
        }
        return out
      })
    : fc.constant(undefined)
  const validQuery = op.query
    ? Arbitrary.make(op.query).map((q) =>
      Object.entries(Schema.encodeSync(op.query as Schema.Schema<any, any>)(q) as Record<string, string>)
    )
      .map((pairs) =>
        pairs.filter(([k, v]) => k !== "cursor" && typeof v === "string").map(([k, v]) =>
          [k, BODY_IDS[k] && pool(BODY_IDS[k]!).length ? pool(BODY_IDS[k]!)[0]! : v] as const
        )
      )
    : fc.constant([] as Array<readonly [string, string]>)
  const validHeaders = op.headers
    ? Arbitrary.make(op.headers).map((h) => Schema.encodeSync(op.headers as Schema.Schema<any, any>)(h) as Record<string, string>)
      .map((h) =>
        Object.fromEntries(
          Object.entries(h).filter(([k, v]) =>
            k !== "idempotency-key" && k !== "x-actor-token" && typeof v === "string" && /^[\x21-\x7e]*$/.test(v)
          )
        )
      )
    : fc.constant({})

  const make = (
    mode: string,
    params: Record<string, string>,
    extra: {
      query?: string
      headers?: Record<string, string>
      /** null: sent without one */
      idempotencyKey?: string | null
      body?: string | Buffer | undefined
      contentType?: string
      expected?: Case["expected"] | undefined
    }
  ): Case => {
    const headers: Record<string, string> = { ...auth, ...extra.headers }
    const key = extra.idempotencyKey === undefined ? freshKey() : extra.idempotencyKey
    if (isMutation(op) && key !== null) headers["idempotency-key"] = key
    if (headers["authorization"] === "") delete headers["authorization"] // no key at all
    if (extra.body !== undefined && extra.contentType !== "") headers["content-type"] = extra.contentType ?? "application/json"
    return {
      mode,
      method: op.method,
      path: pathOf(params),
      query: extra.query ?? "",
      headers,
      body: extra.body,
      ...(extra.expected ? { expected: extra.expected } : {})
    }
  }
  const json = (v: unknown) => (v === undefined ? undefined : JSON.stringify(v))
  const bodyCase = (mode: string, arb: fc.Arbitrary<{ body: string | Buffer; contentType?: string; expected?: Case["expected"] }>) =>
    fc.tuple(cleanParams, arb).map(([p, b]) => make(mode, p, b))
  /** D19: a body's hygiene is judged at the edge, before anything else of the body. */
  const hygiene = (value: unknown, text: string): Case["expected"] | undefined =>
    hasForbiddenText(value) || depthOf(text) > 64 ? { statuses: [400], code: "invalid_request" } : undefined

  const modes: Array<{ arbitrary: fc.Arbitrary<Case>; weight: number }> = []
  const add = (weight: number, arbitrary: fc.Arbitrary<Case>) => modes.push({ weight, arbitrary })
  /** The valid request: one is always sent first (fast-check's `examples`), whatever the draw. */
  let valid: fc.Arbitrary<Case>

  // A multipart upload (uploadFile, D13): its own valid and hostile bodies; JSON is refused.
  if (isUpload) {
    const upload = (mode: string, parts: fc.Arbitrary<ReadonlyArray<Part>>, expected?: Case["expected"]) =>
      fc.tuple(cleanParams, parts).map(([p, ps]) => make(mode, p, { ...multipart(ps), ...(expected ? { expected } : {}) }))
    const purpose = fc.constantFrom("run_input", "knowledge")
    const bytes = fc.uint8Array({ minLength: 1, maxLength: 500 }).map((b) => Buffer.from(b))
    const file = (filename: fc.Arbitrary<string>, data = bytes) =>
      fc.tuple(filename, data).map(([filename, data]): Part => ({ name: "file", filename, type: "application/octet-stream", data }))
    const goodName = fc.constantFrom("a.txt", "report 2026.pdf", "données.csv", "x".repeat(255))
    const field = (name: string, value: fc.Arbitrary<string>) => value.map((v): Part => ({ name, data: Buffer.from(v) }))
    valid = upload("valid", fc.tuple(field("purpose", purpose), file(goodName)))
    add(4, valid)
    add(
      1,
      upload(
        "hostile filename",
        fc.tuple(field("purpose", purpose), file(fc.constantFrom("a/b.txt", "a\\b", "x".repeat(256), "a\u0001b"))),
        // a control character may already be refused by the multipart parser (invalid_request)
        { statuses: [400] }
      )
    )
    add(
      1,
      upload(
        "hostile purpose",
        fc.tuple(
          field(
            "purpose",
            nastyString.filter((v) => v !== "run_input" && v !== "knowledge" && v.length < 900)
          ),
          file(goodName)
        ),
        { statuses: [400] }
      )
    )
    add(1, upload("no file", fc.tuple(field("purpose", purpose)), { statuses: [400], code: "parameter_missing" }))
    add(
      1,
      upload("empty file", fc.tuple(field("purpose", purpose), file(goodName, fc.constant(Buffer.alloc(0)))), {
        statuses: [400],
        code: "file_empty"
      })
    )
    add(
      1,
      upload("unknown field", fc.tuple(field("purpose", purpose), file(goodName), field("extra", fc.constant("1"))), {
        statuses: [400],
        code: "unknown_parameter"
      })
    )
    add(
      1,
      fc.tuple(cleanParams, fc.constantFrom("run_input", "knowledge")).map(([p, purpose]) =>
        make("json body", p, { body: JSON.stringify({ purpose }), expected: { statuses: [400], code: "unsupported_content_type" } })
      )
    )
    add(
      1,
      fc.tuple(cleanParams, fc.uint8Array({ maxLength: 300 })).map(([p, junk]) =>
        make("malformed multipart", p, {
          body: Buffer.from(junk),
          contentType: "multipart/form-data; boundary=zz",
          expected: { statuses: [400] }
        })
      )
    )
    add(
      1,
      fc.tuple(cleanParams, fc.tuple(field("purpose", purpose), file(goodName))).map(([p, ps]) =>
        make("no idempotency key", p, {
          ...multipart(ps),
          idempotencyKey: null,
          expected: { statuses: [400], code: "idempotency_key_required" }
        })
      )
    )
    add(
      1,
      fc.tuple(cleanParams, fc.tuple(field("purpose", purpose), file(goodName))).map(([p, ps]) =>
        make("foreign id", { ...p, tenant_id: foreign.tenantId }, { ...multipart(ps), expected: { statuses: [404] } })
      )
    )
    return { cases: fc.oneof(...modes), valid }
  }

  valid = fc.tuple(cleanParams, validBody, validQuery, validHeaders).map(([p, body, q, h]) =>
    make("valid", p, { query: queryString(q), headers: h, ...(body !== undefined ? { body: json(body)! } : {}) })
  )
  add(6, valid)
  // a hostile path segment in place of one parameter
  if (op.params.length > 0) {
    add(
      2,
      fc.tuple(cleanParams, fc.constantFrom(...op.params), hostileSegment, validBody).map(([p, name, seg, body]) => {
        const refused = refusedInUrl(seg)
        return make("hostile path", { ...p, [name]: seg }, {
          ...(body !== undefined ? { body: json(body)! } : {}),
          ...(refused ? { expected: { statuses: [400, 404] } } : {})
        })
      })
    )
  }
  // another tenant's tenant or resource (D3: 404, never 403, never its data)
  const foreignable = op.params.filter((n) => n === "tenant_id" || (foreign.ids[n]?.length ?? 0) > 0)
  if (foreignable.length > 0) {
    add(
      1,
      fc.tuple(cleanParams, fc.constantFrom(...foreignable), validBody).map(([p, name, body]) =>
        make("foreign id", { ...p, [name]: name === "tenant_id" ? foreign.tenantId : foreign.ids[name]![0]! }, {
          ...(body !== undefined ? { body: json(body)! } : {}),
          ...(op.secured ? { expected: { statuses: op.payload ? [400, 404] : [404] } } : {})
        })
      )
    )
  }
  // hostile query: a bad limit or cursor (D6), a hostile value, an unknown or repeated parameter
  const queryKeys = keysOfStruct(op.query)
  add(
    2,
    fc.tuple(
      cleanParams,
      fc.oneof(
        ...(queryKeys.includes("limit")
          ? [
            fc.constantFrom("0", "101", "-1", "1.5", "1e1", " 5", "05", "abc", "", "99999999999999999999").map((v) => ({
              pairs: [["limit", v]] as const,
              code: undefined as string | undefined
            }))
          ]
          : []),
        ...(queryKeys.includes("cursor")
          ? [
            fc.oneof(
              fc.string({ minLength: 1, maxLength: 40 }),
              fc.jsonValue({ maxDepth: 2 }).map((v) => Buffer.from(JSON.stringify(v) ?? "").toString("base64url"))
            )
              .filter((v) => v.length > 0 && !refusedInUrl(encodeSegment(v)))
              .map((v) => ({ pairs: [["cursor", v]] as const, code: "invalid_cursor" as string | undefined }))
          ]
          : []),
        fc.tuple(fc.constantFrom(...queryKeys, "filter", "__proto__", "limit"), nastyString.filter((s) => s.length < 6_000))
          .map(([k, v]) => ({ pairs: [[k, v]] as const, code: undefined as string | undefined })),
        fc.constant({ pairs: [["limit", "1"], ["limit", "2"]] as const, code: undefined as string | undefined })
      )
    ).map(([p, { code, pairs }]) => {
      const query = queryString(pairs)
      const refused = query.slice(1).split(/[&=]/).some(refusedInUrl)
      const allReal = op.params.every((n) => cellParam(n) !== undefined || pool(n).includes(p[n]!))
      const badLimit = pairs.length === 1 && pairs[0]![0] === "limit" && queryKeys.includes("limit") &&
        !/^(100|[1-9][0-9]?)$/.test(pairs[0]![1])
      const expected = refused
        ? { statuses: [400], code: "invalid_request" }
        : allReal && op.secured && (badLimit || code !== undefined)
        ? { statuses: [400], ...(code ? { code } : {}) }
        : undefined
      return make("hostile query", p, { query, ...(expected ? { expected } : {}) })
    })
  )
  // no key, a wrong one, a malformed header (401 for a secured operation)
  add(
    1,
    fc.tuple(cleanParams, fc.constantFrom("", "Bearer sk_test_bogus", `Bearer ${own.key}x`, "Basic YTpi", "Bearer", "Bearer  "), validBody)
      .map(([p, authorization, body]) =>
        make("no valid key", { ...p }, {
          headers: { authorization },
          ...(body !== undefined ? { body: json(body)! } : {}),
          ...(op.secured ? { expected: { statuses: [401] } } : {})
        })
      )
  )

  if (isMutation(op)) {
    // D5: Idempotency-Key missing or malformed
    add(
      1,
      fc.tuple(cleanParams, fc.constantFrom(undefined, "", "has space", "k".repeat(256), "tab\there"), validBody).map(([p, key, body]) =>
        make("idempotency key", p, {
          idempotencyKey: key ?? null,
          ...(body !== undefined ? { body: json(body)! } : {}),
          expected: { statuses: [400], code: key === undefined ? "idempotency_key_required" : "idempotency_key_invalid" }
        })
      )
    )
    const base = validBody.map((b) => (b !== null && typeof b === "object" && !Array.isArray(b) ? b : {}) as Record<string, unknown>)
    // a field of the wrong type
    add(
      2,
      bodyCase(
        "wrong type",
        fc.tuple(base, fc.nat(), fc.constantFrom(...wrongValues)).map(([b, i, wrong]) => {
          const keys = Object.keys(b)
          if (keys.length === 0) {
            return {
              body: JSON.stringify(wrong),
              expected: op.payload && accepts(payloadAst!, wrong) === false ? { statuses: [400] } : undefined
            }
          }
          const key = keys[i % keys.length]!
          const t = propType(key)
          const body = { ...b, [key]: wrong }
          return {
            body: JSON.stringify(body),
            expected: hygiene(body, "") ?? (t && accepts(t, wrong) === false ? { statuses: [400] } : undefined)
          }
        })
      )
    )
    // an unknown field, at the top or nested (D19: 400 unknown_parameter naming it)
    const fieldName = fc.stringMatching(/^[a-z][a-z_]{0,15}$/).filter((k) => !["__proto__", "constructor", "prototype"].includes(k))
    add(
      2,
      bodyCase(
        "unknown field",
        fc.tuple(base, fieldName, fc.jsonValue({ maxDepth: 2 }), fc.nat(), fc.boolean()).map(([b, name, value, i, nested]) => {
          const objects = pathsOf(b).objects
          const at = nested && objects.length > 0 ? objects[i % objects.length]! : []
          const target = getAt(b, at)
          if (Object.prototype.hasOwnProperty.call(target, name)) return { body: JSON.stringify(b) }
          const body = setAt(b, at, { ...target, [name]: value })
          const text = JSON.stringify(body)
          const closed = op.payload && isClosedStruct(schemaAt(SchemaAST.encodedAST(op.payload.ast), body, at))
          const expected = hygiene(body, text) ??
            (closed ? (at.length === 0 ? { statuses: [400], code: "unknown_parameter", param: name } : { statuses: [400] }) : undefined)
          return { body: text, expected }
        })
      )
    )
    // U+0000, control characters, lone surrogates, long strings in a string (or a key)
    add(
      3,
      bodyCase(
        "hostile string",
        fc.tuple(base, nastyString, fc.nat(), fc.boolean()).map(([b, nasty, i, asKey]) => {
          const strings = pathsOf(b).strings
          const body = asKey || strings.length === 0
            ? { ...b, [nasty]: "v" }
            : setAt(b, strings[i % strings.length]!, `${getAt(b, strings[i % strings.length]!)}${nasty}`)
          const text = JSON.stringify(body)
          return { body: text, expected: hygiene(body, text) }
        })
      )
    )
    // invalid UTF-8 inside a string (D19: 400 invalid_request)
    add(
      1,
      bodyCase(
        "invalid utf-8",
        fc.tuple(base, fc.constantFrom([0xc3, 0x28], [0xff], [0xed, 0xa0, 0x80], [0xc0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80])).map(
          ([b, bytes]) => {
            const [head, tail] = JSON.stringify({ ...b, zz: "\u0001" }).split("\\u0001")
            return {
              body: Buffer.concat([Buffer.from(head!), Buffer.from(bytes), Buffer.from(tail!)]),
              expected: { statuses: [400], code: "invalid_request" }
            }
          }
        )
      )
    )
    // huge numbers and deep nesting, written as text in place of a field
    add(
      2,
      bodyCase(
        "huge or deep",
        fc.tuple(base, fc.nat(), fc.oneof(fc.constantFrom(...hugeNumbers), fc.constantFrom(63, 64, 65, 200, 10_000).map(nest))).map(
          ([b, i, raw]) => {
            const keys = Object.keys(b)
            const key = keys.length > 0 ? keys[i % keys.length]! : "n"
            const text = JSON.stringify({ ...b, [key]: "\u0001RAW" }).replace("\"\\u0001RAW\"", raw)
            const t = propType(key)
            const expected = depthOf(text) > 64
              ? { statuses: [400], code: "invalid_request" }
              : t && accepts(t, JSON.parse(raw)) === false
              ? { statuses: [400] }
              : !t && closedPayload
              ? { statuses: [400], code: "unknown_parameter" }
              : undefined
            return { body: text, expected }
          }
        )
      )
    )
    // random JSON of any shape
    add(
      2,
      bodyCase(
        "random json",
        fc.jsonValue({ maxDepth: 4, stringUnit: "binary" }).map((v) => {
          const text = JSON.stringify(v)
          return {
            body: text,
            expected: hygiene(v, text) ?? (op.payload && accepts(payloadAst!, v) === false ? { statuses: [400] } : undefined)
          }
        })
      )
    )
    // not JSON at all, under various content types
    add(
      2,
      bodyCase(
        "not json",
        fc.tuple(
          fc.oneof(
            fc.string({ unit: "binary", maxLength: 60 }),
            validBody.map((b) => (json(b) ?? "{}").slice(0, -1)),
            fc.constantFrom(
              "{",
              "[1,",
              "nul",
              "{'a':1}",
              "undefined",
              "NaN",
              "\ufeff{}",
              "{\"a\":1}{}",
              "a=b&c=d",
              "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--x--"
            )
          ),
          fc.constantFrom(
            "application/json",
            "application/json; charset=UTF-8",
            "application/merge-patch+json",
            "text/plain",
            "",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json; charset=utf-16",
            "application/octet-stream"
          )
        ).map(([text, contentType]) => {
          let parsed: unknown = undefined
          try {
            parsed = JSON.parse(text)
          } catch { /* not JSON */ }
          // anything but JSON in UTF-8 is refused before the body is read (D19; no Content-Type means JSON)
          const json = contentType === "" || /^application\/json(; charset=utf-8)?$/i.test(contentType)
          const expected = !json
            ? { statuses: [400], code: "unsupported_content_type" }
            : parsed !== undefined
            ? hygiene(parsed, text)
            : text.trim() !== "" && op.payload
            ? { statuses: [400] }
            : undefined
          return { body: text, contentType, ...(expected ? { expected } : {}) }
        })
      )
    )
  }
  return { cases: fc.oneof(...modes), valid }
}

// ---------------------------------------------------------------------------------------------
// The property of one operation

const statuses = new Map<string, Map<string, number>>()
const tally = (op: Operation, c: Case, status: number) => {
  const byOp = statuses.get(op.name) ?? new Map<string, number>()
  byOp.set(`${c.mode} ${status}`, (byOp.get(`${c.mode} ${status}`) ?? 0) + 1)
  statuses.set(op.name, byOp)
}

const property = (op: Operation) =>
  Effect.gen(function*() {
    const app = yield* TestApp
    const port = Number(new URL(app.baseUrl).port)
    const { a, b } = yield* Sandboxes
    const own = isCellDeletion(op) ? yield* bareCell : a
    const tenants = [own.tenantId, a.tenantId, b.tenantId].filter((t, i, all) => all.indexOf(t) === i)
    const db = yield* snapshots
    const run = Runtime.runPromise(yield* Effect.runtime<never>())

    /** Once the cell is deleted, its key answers 401 key_revoked to everything (D19). */
    let cellGone = false
    const check = async (c: Case) => {
      const mutation = isMutation(op)
      if (mutation) await run(db.quiet(tenants))
      const key = c.headers["idempotency-key"] ?? ""
      const before = mutation ? await run(Effect.all([db.rows(tenants), db.idempotency(tenants, key), db.audit(tenants)])) : undefined
      if (process.env["PROPERTIES_TRACE"]) console.log(`${Date.now()} ${describeCase(c)}`)
      const res = await send(port, c)
      tally(op, c, res.status)
      if (isCellDeletion(op) && res.status < 300) cellGone = true
      const what = describeCase(c, res)
      expect(res.status, `a 5xx: ${what}`).toBeLessThan(500)
      expect(res.status, `not an HTTP answer: ${what}`).toBeGreaterThanOrEqual(200)
      try {
        expectCommonHeaders(res)
        if (res.status >= 400) expectErrorCode(res, res.status)
      } catch (e) {
        throw new Error(`not the D3 envelope / D4 headers (${(e as Error).message}): ${what}`)
      }
      if (cellGone && res.status === 401) {
        // the deleted cell's key is revoked: nothing of the cell answers any more
      } else if (c.expected) {
        expect(c.expected.statuses, `answer: ${what}`).toContain(res.status)
        if (c.expected.code) expect(res.body.error.code, `code: ${what}`).toBe(c.expected.code)
        if (c.expected.param) expect(res.body.error.param, `param: ${what}`).toBe(c.expected.param)
      }
      if (before && res.status >= 400) {
        const [rows, idem] = await run(Effect.all([db.rows(tenants), db.idempotency(tenants, key)]))
        expect(rows, `a refused mutation changed rows: ${what}`).toEqual(before[0])
        expect(idem.others, `a refused mutation changed idempotency records: ${what}`).toBe(before[1].others)
        // D5/src/Edge/Idempotency.ts: a 404, 409 or 410 past the gate is stored (replayed); nothing else is
        expect(idem.mine, `stored a ${res.status}: ${what}`).toBeLessThanOrEqual([404, 409, 410].includes(res.status) ? 1 : 0)
        // D16: its audit entry is all it added to the log: one once its key was admitted (the answer
        // carries RateLimit headers; routing refusals come before the key), at most one otherwise
        // (a refused key of the cell), none for what came before the key (URL hygiene, routing)
        const [kept, added] = await run(Effect.all([db.audit(tenants, before[2].last), db.auditSince(tenants, before[2].last)]))
        expect(kept.rows, `a refused mutation changed audit entries: ${what}`).toBe(before[2].rows)
        const admitted = res.headers.get("ratelimit") !== null &&
          !["route_not_found", "method_not_allowed"].includes(res.body?.error?.code)
        expect(added.length, `audit entries of a refused mutation: ${what}`).toBeLessThanOrEqual(1)
        if (admitted || added.length > 0) {
          expect(added, `audit entries of a refused mutation: ${what}`).toEqual([
            { request_id: res.headers.get("x-request-id"), status: res.status }
          ])
        }
      }
    }
    const { cases, valid } = casesOf(op, own, b)
    yield* Effect.promise(() =>
      fc.assert(fc.asyncProperty(cases, check), {
        numRuns: isMutation(op) ? NUM_RUNS.mutation : NUM_RUNS.read,
        examples: [[fc.sample(valid, 1)[0]!]]
      })
    )
    // every operation was reached with real ids and answered, some of it past the edge
    const seen = statuses.get(op.name)!
    expect([...seen.keys()].some((k) => k.startsWith("valid "))).toBe(true)
  })

layer(Env, { excludeTestServices: true, timeout: "120 seconds" })("every /v1 operation under generated input (D19, D3, D5, D6)", (it) => {
  it.effect("the operations are those of the HttpApi definition: every /v1 one, and no other", () =>
    Effect.sync(() => {
      expect(OPERATIONS.length).toBeGreaterThanOrEqual(50)
      const skipped = everyOperation.filter((op) => !OPERATIONS.includes(op)).map((op) => op.path)
      expect(skipped.every((p) => p.startsWith("/operator/v1/") || !p.startsWith("/v1"))).toBe(true)
      expect(OPERATIONS.map((op) => op.name)).toEqual(expect.arrayContaining(["createRun", "streamRunEvents", "deleteTenant", "getJwks"]))
    }))

  for (const op of OPERATIONS) {
    it.effect(`${op.name}: ${op.method} ${op.path}`, () => property(op))
  }

  afterAll(() => {
    if (!process.env["PROPERTIES_SUMMARY"]) return
    for (const [name, byOp] of statuses) console.log(`${name}: ${[...byOp].sort().map(([k, n]) => `${k}×${n}`).join(", ")}`)
  })
})
