/**
 * No request valid by the served OpenAPI document is refused for a rule the document does not state
 * (issue 15). The document is fetched from the running service (`/v1/openapi.json`); for every /v1
 * operation fast-check generates requests valid by it, from the JSON Schema the document uses
 * (type, properties, required, additionalProperties, minProperties, enum, const, pattern, lengths,
 * bounds, formats `date-time` and `uri`, items, oneOf/anyOf/allOf, `$ref`): path parameters (the
 * sandbox's real ids, or generated ones), query parameters, headers (Idempotency-Key on mutations)
 * and JSON bodies (their id fields now and then real ids). They are sent to the real service, with
 * a key holding every scope, and of every answer the test asserts:
 *   - never a 5xx;
 *   - a 400's `error.code` is one the operation's 400 response lists (`x-error-codes`), and its
 *     `error.param`, when present, names a parameter of the operation or a path of its body;
 *   - and, the request being valid by the document, the 400 is one of the rules the document states
 *     for requests its schemas admit (`x-error-rules`: the code, and the field it names with `N`
 *     for an index): a cross-field rule, the state of other resources, a destination's DNS answer.
 * Deleting the environment or the tenant runs against a sandbox of its own. A failure names the
 * request and the answer; fast-check prints its seed (rerun with PROPERTIES_SEED=<seed>).
 * PROPERTIES_RUNS=<n> runs each operation n times; PROPERTIES_SUMMARY=1 prints the answers (status
 * and code) each operation gave; PROPERTIES_TRACE=1 prints every 400 with its request body.
 */
import { OpenApi } from "@effect/platform"
import { afterAll, expect, layer } from "@effect/vitest"
import { Context, Effect, FastCheck as fc, Layer } from "effect"

import { Api } from "../src/Api.js"
import { defaultEdgeConfig, defaultToolConfig } from "../src/Config/AppConfig.js"
import { ALL_SCOPES } from "../src/Kernel/Scopes.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectSingle } from "./support/Envelopes.js"
import { upload } from "./support/Files.js"
import { agentFixture, createUser, isTerminal, scriptedProfile } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { eventually } from "./support/Waiting.js"

const UNLIMITED = { ratePerSecond: 100_000, burst: 100_000 }
/** A destination the operator allowlisted: generated URLs on it pass the destination rules. */
const ALLOWED_HOST = "tools.example.com"
const NUM_RUNS = { read: 12, mutation: 25, cellDeletion: 3 }
const SEED = process.env["PROPERTIES_SEED"] === undefined ? undefined : Number(process.env["PROPERTIES_SEED"])
/** PROPERTIES_RUNS=<n>: this many runs per operation instead (a longer search). */
const RUNS = process.env["PROPERTIES_RUNS"] === undefined ? undefined : Number(process.env["PROPERTIES_RUNS"])

type Json = any
type Schema = Record<string, any> | boolean

// ---------------------------------------------------------------------------------------------
// The operations of the document (in process, to name the tests; each test uses the served one)

const METHODS = ["get", "post", "put", "patch", "delete"]
interface Operation {
  readonly id: string
  readonly method: string
  readonly path: string
}
const operationsOf = (doc: Json): Array<Operation & { readonly op: Json }> =>
  Object.entries<Json>(doc.paths).flatMap(([path, item]) =>
    Object.entries<Json>(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => ({ id: op.operationId as string, method, path, op }))
  )
    .filter((o) => o.path.startsWith("/v1/") && o.path !== "/v1/openapi.json")

const isMutation = (o: Operation) => o.method !== "get"
const isCellDeletion = (o: Operation) => o.method === "delete" && /\/\{(tenant_id|environment)\}$/.test(o.path)
/** Reads first, then creations and updates, deletions last (they remove the fixture's resources), the cell's own at the end. */
const rank = (o: Operation) => (isCellDeletion(o) ? 3 : o.method === "delete" ? 2 : isMutation(o) ? 1 : 0)
const OPERATIONS = operationsOf(OpenApi.fromApi(Api)).sort((a, b) => rank(a) - rank(b))

// ---------------------------------------------------------------------------------------------
// The JSON Schema subset of the document: a validator, and a generator of values it accepts

const refName = "#/components/schemas/"

/** The schema a `$ref` points at (only the document's components). */
const deref = (doc: Json, ref: string): Schema => {
  if (!ref.startsWith(refName)) throw new Error(`unsupported $ref ${ref}`)
  const target = doc.components.schemas[ref.slice(refName.length)]
  if (target === undefined) throw new Error(`dangling $ref ${ref}`)
  return target
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)
const equal = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b)
const codePoints = (s: string) => [...s].length

const daysIn = (year: number, month: number) => new Date(Date.UTC(year, month, 0)).getUTCDate()
/** RFC 3339 `date-time` (section 5.6, upper or lower case `T` and `Z`, a leap second allowed). */
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/
const isDateTime = (s: string) => {
  const m = RFC3339.exec(s)
  if (!m) return false
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])]
  return month >= 1 && month <= 12 && day >= 1 && day <= daysIn(year, month)
}
/** RFC 3986 `URI` (absolute, a scheme): only the characters it allows, well-formed escapes. */
const isUri = (s: string) => /^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]*$/.test(s) && !/%(?![0-9A-Fa-f]{2})/.test(s)

const typeOk = (type: string, v: unknown) => {
  switch (type) {
    case "string":
      return typeof v === "string"
    case "integer":
      return typeof v === "number" && Number.isInteger(v)
    case "number":
      return typeof v === "number" && Number.isFinite(v)
    case "boolean":
      return typeof v === "boolean"
    case "null":
      return v === null
    case "array":
      return Array.isArray(v)
    case "object":
      return isObject(v)
    default:
      throw new Error(`unsupported type ${type}`)
  }
}

/** Whether `v` is valid by `s` (the keywords the document uses; an unknown keyword fails loudly). */
const valid = (doc: Json, s: Schema, v: unknown): boolean => {
  if (s === true) return true
  if (s === false) return false
  for (const key of Object.keys(s)) {
    if (!KNOWN.has(key)) throw new Error(`unsupported JSON Schema keyword ${key}`)
  }
  if (s.$ref !== undefined && !valid(doc, deref(doc, s.$ref), v)) return false
  if (s.const !== undefined && !equal(s.const, v)) return false
  if (s.enum !== undefined && !s.enum.some((e: unknown) => equal(e, v))) return false
  if (s.type !== undefined && ![s.type].flat().some((t: string) => typeOk(t, v))) return false
  if (typeof v === "string") {
    if (s.minLength !== undefined && codePoints(v) < s.minLength) return false
    if (s.maxLength !== undefined && codePoints(v) > s.maxLength) return false
    if (s.pattern !== undefined && !new RegExp(s.pattern, "u").test(v)) return false
    if (s.format === "date-time" && !isDateTime(v)) return false
    if (s.format === "uri" && !isUri(v)) return false
  }
  if (typeof v === "number") {
    if (s.minimum !== undefined && v < s.minimum) return false
    if (s.maximum !== undefined && v > s.maximum) return false
    if (s.exclusiveMinimum !== undefined && v <= s.exclusiveMinimum) return false
    if (s.exclusiveMaximum !== undefined && v >= s.exclusiveMaximum) return false
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) return false
    if (s.maxItems !== undefined && v.length > s.maxItems) return false
    if (s.items !== undefined && !v.every((x) => valid(doc, s.items, x))) return false
  }
  if (isObject(v)) {
    const keys = Object.keys(v)
    if (s.minProperties !== undefined && keys.length < s.minProperties) return false
    if ((s.required ?? []).some((k: string) => !keys.includes(k))) return false
    for (const k of keys) {
      const own = s.properties?.[k]
      if (own !== undefined) {
        if (!valid(doc, own, v[k])) return false
      } else if (s.additionalProperties !== undefined && !valid(doc, s.additionalProperties, v[k])) return false
    }
  }
  if (s.allOf !== undefined && !s.allOf.every((x: Schema) => valid(doc, x, v))) return false
  if (s.anyOf !== undefined && !s.anyOf.some((x: Schema) => valid(doc, x, v))) return false
  if (s.oneOf !== undefined && s.oneOf.filter((x: Schema) => valid(doc, x, v)).length !== 1) return false
  return true
}
const ANNOTATIONS = ["title", "description", "default", "examples", "discriminator", "$comment", "deprecated", "readOnly", "writeOnly"]
const KNOWN = new Set([
  ...ANNOTATIONS,
  "$ref",
  "const",
  "enum",
  "type",
  "minLength",
  "maxLength",
  "pattern",
  "format",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "items",
  "minItems",
  "maxItems",
  "properties",
  "required",
  "additionalProperties",
  "minProperties",
  "allOf",
  "anyOf",
  "oneOf"
])

/** RFC 3339 date-times of every form the grammar has (lower-case `t`/`z`, leap seconds, offsets, fractions). */
const dateTime = fc.record({
  year: fc.oneof({ arbitrary: fc.integer({ min: 1990, max: 2100 }), weight: 8 }, {
    arbitrary: fc.integer({ min: 0, max: 9999 }),
    weight: 2
  }),
  month: fc.integer({ min: 1, max: 12 }),
  day: fc.integer({ min: 1, max: 31 }),
  hour: fc.integer({ min: 0, max: 23 }),
  minute: fc.integer({ min: 0, max: 59 }),
  second: fc.oneof({ arbitrary: fc.integer({ min: 0, max: 59 }), weight: 20 }, { arbitrary: fc.constant(60), weight: 1 }),
  fraction: fc.option(fc.stringMatching(/^\.\d{1,9}$/), { nil: "" }),
  t: fc.oneof({ arbitrary: fc.constant("T"), weight: 9 }, { arbitrary: fc.constant("t"), weight: 1 }),
  offset: fc.oneof(
    fc.constantFrom("Z", "z"),
    fc.tuple(fc.constantFrom("+", "-"), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }))
      .map(([sign, h, m]) => `${sign}${String(h).padStart(2, "0")}:${String(m).padStart(2, "0")}`)
  )
}).map((d) => {
  const pad = (n: number, w = 2) => String(n).padStart(w, "0")
  const day = Math.min(d.day, daysIn(d.year, d.month))
  return `${pad(d.year, 4)}-${pad(d.month)}-${pad(day)}${d.t}${pad(d.hour)}:${pad(d.minute)}:${pad(d.second)}${d.fraction}${d.offset}`
})

/** URIs: mostly http(s) URLs on the allowlisted host, a public or private address, a name that does not resolve; other schemes too. */
const uri = fc.tuple(
  // constantFrom leans to its first values: mostly a URL
  fc.constantFrom("url", "url", "url", "url", "url", "url", "url", "url", "other"),
  fc.record({
    scheme: fc.constantFrom("https", "https", "https", "http"),
    host: fc.oneof(
      fc.constantFrom(ALLOWED_HOST, ALLOWED_HOST, ALLOWED_HOST, "93.184.216.34", "8.8.8.8", "10.0.0.7", "127.0.0.1", "localhost", "[::1]"),
      fc.stringMatching(/^[a-z][a-z0-9]{0,8}\.(example\.com|test)$/)
    ),
    port: fc.constantFrom("", "", ":443", ":8443", ":80"),
    path: fc.oneof(fc.constant(""), fc.constant("/"), fc.stringMatching(/^(\/[a-z0-9._~-]{1,8}){1,3}\/?$/)),
    query: fc.constantFrom("", "", "?a=1", "?q="),
    fragment: fc.constantFrom("", "", "#f", "#")
  }).map((u) => `${u.scheme}://${u.host}${u.port}${u.path}${u.query}${u.fragment}`),
  fc.constantFrom("ftp://files.example.com/x", "mailto:ops@example.com", "urn:example:animal:ferret", "file:///etc/passwd")
).map(([kind, url, other]) => (kind === "url" ? url : other))

/** Text as JSON carries it: ASCII mostly, any Unicode (well-formed) now and then. */
const text = (min: number, max: number) =>
  fc.oneof(
    { arbitrary: fc.string({ unit: "grapheme-ascii", minLength: min, maxLength: max }), weight: 3 },
    { arbitrary: fc.string({ unit: "grapheme", minLength: min, maxLength: max }), weight: 1 }
  )
const anyJson = fc.jsonValue({ maxDepth: 2 })
const propertyName = fc.stringMatching(/^[a-z][a-z0-9_]{0,10}$/).filter((k) => !["__proto__", "constructor", "prototype"].includes(k))

/** A record of these fields, only `required` ones always present. */
const recordOf = (model: Record<string, fc.Arbitrary<unknown>>, required: ReadonlyArray<string>) =>
  fc.record(model, { requiredKeys: required.filter((k) => k in model) as Array<never> }) as fc.Arbitrary<Record<string, unknown>>

/** The keywords of `s` that constrain a value itself (not through a composition). */
const substantive = (s: Record<string, any>) =>
  Object.keys(s).some((k) => !ANNOTATIONS.includes(k) && !["allOf", "anyOf", "oneOf"].includes(k))

/** A generator of values valid by `s`. */
const arbitrary = (doc: Json, s: Schema, depth = 0): fc.Arbitrary<unknown> => {
  if (s === true || (typeof s === "object" && !substantive(s) && !s.allOf && !s.anyOf && !s.oneOf)) return anyJson
  if (s === false) throw new Error("a schema that admits nothing")
  const check = (a: fc.Arbitrary<unknown>) => a.filter((v) => valid(doc, s, v))
  if (!substantive(s)) {
    // a composition: one alternative (oneOf/anyOf), or the first part (allOf), then every constraint
    const alternatives: Array<Schema> = s.oneOf ?? s.anyOf ?? [s.allOf[0]]
    return check(fc.oneof(...alternatives.map((a) => arbitrary(doc, a, depth))))
  }
  if (s.$ref !== undefined) return check(arbitrary(doc, deref(doc, s.$ref), depth))
  if (s.const !== undefined) return check(fc.constant(s.const))
  if (s.enum !== undefined) return check(fc.constantFrom(...s.enum))
  const type = [s.type ?? (s.properties ? "object" : undefined)].flat()[0]
  switch (type) {
    case "string": {
      const max = Math.min(s.maxLength ?? 40, Math.max(s.minLength ?? 0, 40))
      const base = s.format === "date-time"
        ? dateTime
        : s.format === "uri"
        ? uri
        : s.pattern !== undefined
        ? fc.stringMatching(new RegExp(s.pattern))
        : text(s.minLength ?? 0, max)
      return check(base)
    }
    case "integer":
      return check(fc.integer({
        min: Math.max(s.minimum ?? -1_000_000, s.exclusiveMinimum === undefined ? -Infinity : s.exclusiveMinimum + 1),
        max: Math.min(s.maximum ?? 1_000_000, s.exclusiveMaximum === undefined ? Infinity : s.exclusiveMaximum - 1)
      }))
    case "number": {
      const min = s.minimum ?? s.exclusiveMinimum ?? -1e9
      const max = s.maximum ?? s.exclusiveMaximum ?? 1e9
      return check(
        fc.oneof(fc.integer({ min: Math.ceil(min), max: Math.floor(max) }), fc.double({ min, max, noNaN: true, noDefaultInfinity: true }))
      )
    }
    case "boolean":
      return fc.boolean()
    case "null":
      return fc.constant(null)
    case "array": {
      const min = s.minItems ?? 0
      const max = Math.min(s.maxItems ?? 3, Math.max(min, 3))
      return check(fc.array(s.items === undefined ? anyJson : arbitrary(doc, s.items, depth + 1), { minLength: min, maxLength: max }))
    }
    case "object": {
      const properties: Record<string, Schema> = s.properties ?? {}
      const required: Array<string> = s.required ?? []
      const named = recordOf(
        Object.fromEntries(Object.entries(properties).map(([k, p]) => [k, arbitrary(doc, p, depth + 1)])),
        required
      )
      const open = s.additionalProperties !== undefined && s.additionalProperties !== false
      const extra = open && depth < 4
        ? fc.dictionary(
          propertyName.filter((k) => !(k in properties)),
          arbitrary(doc, s.additionalProperties, depth + 1),
          { maxKeys: 2 }
        )
        : fc.constant({})
      return check(fc.tuple(extra, named).map(([e, n]) => ({ ...e, ...n })))
    }
    default:
      throw new Error(`no generator for ${JSON.stringify(s).slice(0, 200)}`)
  }
}

/**
 * The body paths a schema documents: `a.N.b` (`N` an index), and `a.*` below a free-form object
 * (additional properties of any shape).
 */
const bodyPaths = (doc: Json, s: Schema, at: string, out: Set<string>, seen: Set<string> = new Set()): Set<string> => {
  if (at !== "") out.add(at)
  if (typeof s !== "object") {
    if (s === true && at !== "") out.add(`${at}.*`)
    return out
  }
  const join = (key: string) => (at === "" ? key : `${at}.${key}`)
  if (s.$ref !== undefined && !seen.has(s.$ref)) bodyPaths(doc, deref(doc, s.$ref), at, out, new Set([...seen, s.$ref]))
  for (const part of [...(s.allOf ?? []), ...(s.anyOf ?? []), ...(s.oneOf ?? [])]) bodyPaths(doc, part, at, out, seen)
  for (const [key, p] of Object.entries<Schema>(s.properties ?? {})) bodyPaths(doc, p, join(key), out, seen)
  if (s.items !== undefined) bodyPaths(doc, s.items, join("N"), out, seen)
  if (s.additionalProperties !== undefined && s.additionalProperties !== false) out.add(join("*"))
  if ((s.type === "object" || s.type === "array") && !s.properties && !s.items && s.additionalProperties === undefined) {
    out.add(join("*"))
  }
  return out
}

/** Whether `param` (the server's) is the documented path `template` (`N`: an index; `*`: anything below). */
const matchesPath = (template: string, param: string) => {
  const pattern = template.split(".").map((seg) => seg === "N" ? "\\d+" : seg === "*" ? ".+" : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
    .join("\\.")
  return new RegExp(`^${pattern}$`, "i").test(param)
}

// ---------------------------------------------------------------------------------------------
// The sandbox: a key with every scope, one of everything

type Pool = Record<string, ReadonlyArray<string>>
interface Cell {
  readonly tenantId: string
  readonly key: string
  readonly ids: Pool
}
class Fixture extends Context.Tag("Fixture")<Fixture, Cell>() {}

const created = (r: { status: number; text: string; body: any }, status = 201) => expectSingle(r as any, status).id as string

const populate = Effect.gen(function*() {
  const sb = yield* provisionSandbox(ALL_SCOPES, "Acme")
  const post = (suffix: string, body?: unknown) => request("POST", `${sb.P}${suffix}`, { key: sb.key, body })
  const { agent, mp, rev, ws } = yield* agentFixture(sb.P, sb.key, {
    profile: scriptedProfile([{ type: "text", text: "ok" }]),
    instructions: "Be brief.",
    tool_ids: []
  })
  const users = [yield* createUser(sb.P, sb.key, "u1"), yield* createUser(sb.P, sb.key, "u2")]
  const actor = created(yield* post("/service-actors", { name: "svc" }))
  // a webhook endpoint (on the allowlisted host, which does not resolve: its deliveries stay pending) and the run's delivery
  const endpoint = created(yield* post("/webhook-endpoints", { url: `https://${ALLOWED_HOST}/hooks`, event_types: ["run.succeeded"] }))
  const conversation = created(yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id }))
  const run = created(yield* post(`/conversations/${conversation}/runs`, { input: [{ type: "text", text: "hi" }] }), 202)
  yield* eventually(request("GET", `${sb.P}/runs/${run}`, { key: sb.key }), (r) => isTerminal(r.body?.data?.status))
  const events = yield* request("GET", `${sb.P}/runs/${run}/events`, { key: sb.key })
  const deliveries = yield* eventually(
    request("GET", `${sb.P}/webhook-deliveries`, { key: sb.key }),
    (r) => r.body?.items?.length === 1
  )
  const spare = [
    (yield* createKey(sb.tenantId, ["users:read"], "spare-1")).id,
    (yield* createKey(sb.tenantId, ["users:read"], "spare-2")).id
  ]
  const gone = yield* createUser(sb.P, sb.key, "to-delete")
  const job = created(yield* request("DELETE", `${sb.P}/users/${gone.id}`, { key: sb.key }), 202)
  const connection = created(yield* post("/connections", connectionBody(`https://${ALLOWED_HOST}`)))
  const review = yield* operator("POST", `/connections/${connection}/review`, { decision: "approve" })
  expect(review.status, review.text).toBe(200)
  const tools = yield* request("GET", `${sb.P}/tools?connection_id=${connection}`, { key: sb.key })
  // a workspace memory item (D14)
  const memoryKey = "notes:greeting"
  expectSingle(yield* request("PUT", `${sb.P}/workspaces/${ws.id}/memory/${memoryKey}`, { key: sb.key, body: { value: "hi" } }))
  const files = [
    created(yield* upload(sb.P, sb.key, "one", { purpose: "knowledge", filename: "one.txt", type: "text/plain" })),
    created(yield* upload(sb.P, sb.key, "two", { purpose: "knowledge", filename: "two.txt", type: "text/plain" }))
  ]
  // a schedule (D15) that fires on 1 January only
  const schedule = created(
    yield* post("/schedules", { workspace_id: ws.id, agent_revision_id: rev.id, cron: "0 0 1 1 *", input: [{ type: "text", text: "hi" }] })
  )
  const ids: Pool = {
    user_id: users.map((u) => u.id),
    service_actor_id: [actor],
    workspace_id: [ws.id],
    model_profile_id: [mp.id],
    default_model_profile_id: [mp.id],
    agent_id: [agent.id],
    revision_id: [rev.id],
    agent_revision_id: [rev.id],
    conversation_id: [conversation],
    run_id: [run],
    key_id: spare, // never the key the test uses
    deletion_job_id: [job],
    connection_id: [connection],
    tool_id: tools.body.items.map((t: any) => t.id),
    tool_ids: tools.body.items.map((t: any) => t.id),
    event_id: events.body.items.map((e: any) => e.id),
    endpoint_id: [endpoint],
    delivery_id: deliveries.body.items.map((d: any) => d.id),
    schedule_id: [schedule],
    key: [memoryKey],
    file_id: files
  }
  return { tenantId: sb.tenantId, key: sb.key, ids } satisfies Cell
})

/** A sandbox of its own, for deleting the environment or the tenant. */
const bareCell = Effect.map(provisionSandbox(ALL_SCOPES, "Doomed"), (sb) => ({ tenantId: sb.tenantId, key: sb.key, ids: {} }))

const Env = Layer.effect(Fixture, populate).pipe(
  Layer.provideMerge(makeTestApp({
    rateLimit: UNLIMITED,
    edge: { ...defaultEdgeConfig, clientRateLimit: UNLIMITED },
    tools: { ...defaultToolConfig, reconcileRetrySeconds: 86_400, destinationAllowlist: ALLOWED_HOST }
  }))
)

// ---------------------------------------------------------------------------------------------
// Requests valid by the document

interface Case {
  readonly method: string
  /** the path with `{tenant_id}` left for the cell the request runs against (when it is the own tenant) */
  readonly path: string
  readonly query: ReadonlyArray<readonly [string, string]>
  readonly headers: Record<string, string>
  readonly body: unknown
  /** a multipart/form-data body (file uploads): its fields, and its one file's bytes */
  readonly form?: { readonly fields: Record<string, string>; readonly file: Uint8Array; readonly filename: string } | undefined
}

/** Header values HTTP can carry: visible ASCII, inner spaces. */
const headerSafe = (v: unknown): v is string => typeof v === "string" && /^[\x21-\x7E]([\x20-\x7E]*[\x21-\x7E])?$/.test(v)
/** A path segment a URL keeps as it is (not a dot segment). */
const segmentSafe = (v: string) => !/^(\.|%2e){1,2}$/i.test(v)

const OWN_TENANT = "{own}"

const casesOf = (doc: Json, o: Operation & { op: Json }, cell: Cell) => {
  const parameters: Array<Json> = o.op.parameters ?? []
  const real = (name: string) => cell.ids[name] ?? []
  const withReal = (name: string, generated: fc.Arbitrary<unknown>, weight = 3): fc.Arbitrary<unknown> =>
    real(name).length > 0 ? fc.oneof({ arbitrary: fc.constantFrom(...real(name)), weight }, { arbitrary: generated, weight: 1 }) : generated

  const pathParams = fc.record(Object.fromEntries(
    parameters.filter((p) => p.in === "path").map((p) => {
      const generated = arbitrary(doc, p.schema).filter((v) => segmentSafe(String(v)))
      if (p.name === "tenant_id") {
        return [p.name, fc.oneof({ arbitrary: fc.constant(OWN_TENANT), weight: 8 }, { arbitrary: generated, weight: 1 })]
      }
      if (p.name === "environment") {
        return [p.name, fc.oneof({ arbitrary: fc.constant("sandbox"), weight: 6 }, { arbitrary: generated, weight: 1 })]
      }
      return [p.name, withReal(p.name, generated)]
    })
  )) as fc.Arbitrary<Record<string, unknown>>

  const queryParams = recordOf(
    Object.fromEntries(parameters.filter((p) => p.in === "query").map((p) => [p.name, withReal(p.name, arbitrary(doc, p.schema), 1)])),
    parameters.filter((p) => p.in === "query" && p.required).map((p) => p.name)
  )

  const headerParams = recordOf(
    Object.fromEntries(
      parameters.filter((p) => p.in === "header").map((p) => {
        const values = p.name === "Last-Event-ID"
          ? withReal("event_id", arbitrary(doc, p.schema), 1)
          : arbitrary(doc, p.schema)
        return [p.name, values.filter(headerSafe)]
      })
    ),
    parameters.filter((p) => p.in === "header" && p.required).map((p) => p.name)
  )
    // an actor token names a session (403 `actor_token_invalid` without one): rarely sent
    .chain((h) =>
      fc.integer({ min: 0, max: 9 }).map((n) => {
        const { "X-Actor-Token": token, ...rest } = h
        return n === 0 && token !== undefined ? h : rest
      })
    )

  const schema = o.op.requestBody?.content?.["application/json"]?.schema
  const body: fc.Arbitrary<unknown> = schema === undefined
    ? fc.constant(undefined)
    : fc.tuple(arbitrary(doc, schema), fc.boolean(), fc.nat()).map(([value, useReal, pick]) => {
      if (!useReal || !isObject(value)) return value
      const out: Record<string, unknown> = { ...value }
      for (const field of Object.keys(out)) {
        const ids = real(field)
        if (ids.length === 0 || field === "run_id") continue
        out[field] = Array.isArray(out[field]) ? ids.slice(0, 1 + (pick % ids.length)) : ids[pick % ids.length]
      }
      return valid(doc, schema, out) ? out : value
    })

  // A multipart body (an upload): the schema's string fields from their enums, and 1 to 2,000 bytes of file.
  const multipart = o.op.requestBody?.content?.["multipart/form-data"]?.schema
  const form = multipart === undefined ? fc.constant(undefined) : fc.record({
    fields: fc.record(Object.fromEntries(
      Object.entries<Json>((multipart.$ref === undefined ? multipart : deref(doc, multipart.$ref)).properties ?? {}).filter(([, p]) =>
        p.format !== "binary" && p.type !== "array"
      )
        .map(([name, p]) => [name, arbitrary(doc, p).map(String)])
    )),
    file: fc.uint8Array({ minLength: 1, maxLength: 2_000 }),
    filename: fc.constantFrom("a.txt", "report 2026.pdf", "données.csv")
  })

  return fc.record({ path: pathParams, query: queryParams, headers: headerParams, body, form }).map((
    { body, form, headers, path, query }
  ): Case => ({
    method: o.method.toUpperCase(),
    path: o.path.replace(
      /\{(\w+)\}/g,
      (_, name: string) => (path[name] === OWN_TENANT ? OWN_TENANT : encodeURIComponent(String(path[name])))
    ),
    query: Object.entries(query).map(([k, v]) => [k, String(v)] as const),
    headers: headers as Record<string, string>,
    body,
    form
  }))
}

interface Answer {
  readonly status: number
  readonly body: any
  readonly text: string
}

const send = async (baseUrl: string, cell: Cell, c: Case): Promise<Answer> => {
  const path = c.path.replace(OWN_TENANT, cell.tenantId)
  const query = c.query.length === 0 ? "" : `?${c.query.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&")}`
  const headers: Record<string, string> = { ...c.headers, authorization: `Bearer ${cell.key}` }
  if (c.body !== undefined) headers["content-type"] = "application/json"
  let form: FormData | undefined
  if (c.form !== undefined) {
    form = new FormData()
    for (const [name, value] of Object.entries(c.form.fields)) form.append(name, value)
    form.append("file", new Blob([c.form.file]), c.form.filename)
  }
  const abort = new AbortController()
  // An event stream resumed after its run's last event sends nothing (its headers with its first
  // ping, 15 s later): its answer is that nothing was refused.
  const stream = c.path.endsWith("/events/stream")
  const timer = setTimeout(() => abort.abort(), stream ? 2_000 : 20_000)
  try {
    const res = await fetch(`${baseUrl}${path}${query}`, {
      method: c.method,
      headers,
      signal: abort.signal,
      ...(c.body !== undefined ? { body: JSON.stringify(c.body) } : form !== undefined ? { body: form } : {})
    })
    if (res.headers.get("content-type")?.startsWith("text/event-stream")) {
      await res.body?.cancel() // a stream: its status is the answer
      return { status: res.status, body: undefined, text: "" }
    }
    const text = await res.text()
    let body: any
    try {
      body = JSON.parse(text)
    } catch {
      body = undefined
    }
    return { status: res.status, body, text }
  } catch (e) {
    if (stream && abort.signal.aborted) return { status: 0, body: undefined, text: "(an open event stream: no bytes within 2 s)" }
    throw e
  } finally {
    clearTimeout(timer)
  }
}

const show = (v: unknown, max = 600) => {
  const text = JSON.stringify(v) ?? "(none)"
  return text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text
}
const describeCase = (c: Case, res: Answer) =>
  `${c.method} ${c.path}${c.query.length ? ` query ${show(c.query)}` : ""}\n  headers: ${show(c.headers)}\n  body: ${show(c.body)}` +
  `\n  -> ${res.status} ${res.text.slice(0, 500)}`

// ---------------------------------------------------------------------------------------------
// The property of one operation

const statuses = new Map<string, Map<string, number>>()

const property = (o: Operation) =>
  Effect.gen(function*() {
    const app = yield* TestApp
    const fixture = yield* Fixture
    const served = yield* request("GET", "/v1/openapi.json")
    expect(served.status).toBe(200)
    const doc = served.body
    const op = operationsOf(doc).find((x) => x.id === o.id)
    expect(op, `${o.id} is in the served document`).toBeDefined()
    const invalid = op!.op.responses["400"]
    const codes: Array<string> = invalid["x-error-codes"]
    const rules: Array<{ code: string; param?: string; when: string }> = invalid["x-error-rules"]
    const parameterNames = (op!.op.parameters ?? []).map((p: Json) => String(p.name).toLowerCase())
    const schema = op!.op.requestBody?.content?.["application/json"]?.schema ??
      op!.op.requestBody?.content?.["multipart/form-data"]?.schema
    const paths = schema === undefined ? [] : [...bodyPaths(doc, schema, "", new Set())]
    const documented = (param: string) => parameterNames.includes(param.toLowerCase()) || paths.some((t) => matchesPath(t, param))
    const tally = statuses.get(o.id) ?? new Map<string, number>()
    statuses.set(o.id, tally)
    const run = async (c: Case) => {
      const cell = isCellDeletion(o) && c.path.includes(OWN_TENANT)
        ? await Effect.runPromise(Effect.provideService(bareCell, TestApp, app))
        : fixture
      const res = await send(app.baseUrl, cell, c)
      const answer = `${res.status}${res.body?.error?.code ? ` ${res.body.error.code}` : ""}`
      tally.set(answer, (tally.get(answer) ?? 0) + 1)
      const what = describeCase(c, res)
      expect(res.status, `a 5xx to a request valid by the document: ${what}`).toBeLessThan(500)
      if (res.status !== 400) return
      if (process.env["PROPERTIES_TRACE"]) console.log(`${res.body?.error?.code}: ${res.body?.error?.message} ${show(c.body, 300)}`)
      const error = res.body?.error
      expect(error?.type, `not the D3 envelope: ${what}`).toBe("invalid_request")
      expect(codes, `a 400 code the operation does not list (x-error-codes): ${what}`).toContain(error.code)
      if (error.param !== undefined) {
        expect(documented(error.param), `a param the operation does not document: ${what}`).toBe(true)
      }
      const stated = rules.some((r) =>
        r.code === error.code && (r.param === undefined || (error.param !== undefined && matchesPath(r.param, error.param)))
      )
      expect(stated, `a request valid by the document refused for a rule it does not state (x-error-rules): ${what}`).toBe(true)
    }
    yield* Effect.promise(() =>
      fc.assert(fc.asyncProperty(casesOf(doc, op!, fixture), run), {
        numRuns: RUNS ?? (isCellDeletion(o) ? NUM_RUNS.cellDeletion : isMutation(o) ? NUM_RUNS.mutation : NUM_RUNS.read),
        ...(SEED !== undefined ? { seed: SEED } : {})
      })
    )
  })

layer(Env, { excludeTestServices: true, timeout: "120 seconds" })("requests valid by the OpenAPI document (issue 15)", (it) => {
  it.effect("every /v1 operation's 400 lists its codes and rules; its own rules are in its description", () =>
    Effect.gen(function*() {
      const served = yield* request("GET", "/v1/openapi.json")
      const ops = operationsOf(served.body)
      expect(ops.map((o) => o.id).sort()).toEqual(OPERATIONS.map((o) => o.id).sort())
      expect(ops.length).toBeGreaterThan(45)
      for (const { id, method, op } of ops) {
        const invalid = op.responses["400"]
        const codes: Array<string> = invalid["x-error-codes"]
        const rules: Array<{ code: string; param?: string; when: string }> = invalid["x-error-rules"]
        expect(codes, id).toEqual(expect.arrayContaining(["parameter_invalid", "invalid_request"]))
        if (method !== "get") {
          expect(codes, id).toEqual(
            expect.arrayContaining(["idempotency_key_required", "idempotency_key_invalid", "unsupported_content_type", "invalid_body"])
          )
        }
        if (op.requestBody) expect(codes, id).toEqual(expect.arrayContaining(["parameter_missing", "unknown_parameter", "body_too_large"]))
        for (const rule of rules) {
          expect(codes, `${id} ${rule.code}`).toContain(rule.code)
          const generic = (rule.code === "invalid_cursor" && rule.param === "cursor") ||
            ["body_too_large", "invalid_request"].includes(rule.code)
          if (!generic) expect(op.description, `${id}: ${rule.when}`).toContain(rule.when)
        }
        for (const c of codes) expect(invalid.description, `${id} ${c}`).toContain(`\`${c}\``)
      }
      const byId = new Map(ops.map((o) => [o.id, o.op]))
      // the issue's list: formats, and the provider settings as a union discriminated by provider
      const usage = byId.get("getUsage").parameters
      for (const name of ["from", "to"]) expect(usage.find((p: Json) => p.name === name).schema.format, name).toBe("date-time")
      const connection = byId.get("createConnection").requestBody.content["application/json"].schema
      expect(connection.properties.base_url.format).toBe("uri")
      const profile = byId.get("createModelProfile").requestBody.content["application/json"].schema
      expect(profile.discriminator.propertyName).toBe("provider")
      expect(Object.keys(profile.discriminator.mapping).sort()).toEqual(["anthropic", "openai", "openai_compatible", "scripted"])
      const scripted = served.body.components.schemas[profile.discriminator.mapping.scripted.slice(refName.length)]
      expect(scripted.required).toContain("settings")
      expect(served.body.components.schemas.ScriptedSettings.required).toEqual(["steps"])
    }))

  for (const o of OPERATIONS) {
    it.effect(`${o.id}: ${o.method.toUpperCase()} ${o.path}`, () => property(o))
  }

  afterAll(() => {
    if (!process.env["PROPERTIES_SUMMARY"]) return
    for (const [id, answers] of statuses) console.log(`${id}: ${[...answers].sort().map(([a, n]) => `${a} ×${n}`).join(", ")}`)
  })
})
