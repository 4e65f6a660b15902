/**
 * The operator CLI (D1): `npm run operator -- <command>`. It talks to a running server's operator
 * plane over HTTP with the operator token (OPERATOR_TOKEN, else DATA_DIR/operator-token).
 *
 *   npm run operator -- provision-sandbox --organization "Acme" --email ops@acme.test
 *   npm run operator -- apply-pilot --organization "Acme" --email ops@acme.test
 *   npm run operator -- approve-pilot pilot_...
 *   npm run operator -- create-key --tenant ten_... --name ci [--scopes users:read,users:write]
 *   npm run operator -- quickstart --tenant ten_... [--environment sandbox]
 *   npm run operator -- production-requests [--status submitted]
 *   npm run operator -- production-request preq_...
 *   npm run operator -- approve-production preq_...
 *   npm run operator -- reject-production preq_... [--reason "..."]
 *   npm run operator -- create-key --tenant ten_... --environment production --name live
 */
import { Args, Command, Options } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Option } from "effect"

import { dataDirOf, serviceUrl, writeSandboxFile } from "./LocalFiles.js"
import { readTokenFile } from "./Token.js"

const url = Options.text("url").pipe(
  Options.withDescription(
    "Base URL of the running server (default: OPERATOR_URL, else the service running on DATA_DIR (its service.json), else http://127.0.0.1:$PORT)"
  ),
  Options.optional
)

class CliError extends Error {}

const rootOf = (base: Option.Option<string>) => serviceUrl(Option.getOrUndefined(base) ?? process.env.OPERATOR_URL)

const call = (base: Option.Option<string>, method: string, path: string, body?: unknown) =>
  Effect.gen(function*() {
    const root = rootOf(base)
    const envToken = process.env.OPERATOR_TOKEN
    const token = envToken && envToken.length > 0
      ? envToken
      : Option.getOrElse(yield* readTokenFile(dataDirOf()), () => "")
    if (token === "") {
      return yield* Effect.fail(new CliError("No operator token: set OPERATOR_TOKEN or DATA_DIR (where the server stored operator-token)"))
    }
    const res = yield* Effect.tryPromise({
      try: () =>
        fetch(`${root}/operator/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {})
        }),
      catch: (e) => new CliError(`Cannot reach ${root}: ${String(e)}`)
    })
    const json = yield* Effect.promise(() => res.json().catch(() => ({})))
    if (!res.ok) {
      return yield* Effect.fail(new CliError(`${method} ${path} -> ${res.status}: ${JSON.stringify(json)}`))
    }
    return json as any
  })

const json = Options.boolean("json").pipe(Options.withDescription("Print the answer as JSON (for scripts)"))

const isScalar = (v: unknown) => v === null || typeof v !== "object"
const scalar = (v: unknown) => (typeof v === "string" ? v : JSON.stringify(v))

/**
 * `key: value` lines, nested objects indented, a list of plain values on one line separated by
 * commas (what a person reads); `--json`: the JSON itself.
 */
const readable = (value: unknown, indent = ""): string =>
  value !== null && typeof value === "object"
    ? Object.entries(value).map(([k, v]) =>
      Array.isArray(v) && v.every(isScalar)
        ? `${indent}${k}: ${v.map(scalar).join(", ")}`
        : v !== null && typeof v === "object" && Object.keys(v).length > 0
        ? `${indent}${k}:\n${readable(v, `${indent}  `)}`
        : `${indent}${k}: ${scalar(v)}`
    ).join("\n")
    : `${indent}${String(value)}`

const printer = (asJson: boolean) => (value: unknown) => Console.log(asJson ? JSON.stringify(value, null, 2) : readable(value))

const organization = Options.text("organization").pipe(Options.withDescription("Organization name"))
const email = Options.text("email").pipe(Options.withDescription("Contact email"))
const tenant = Options.text("tenant").pipe(Options.withDescription("Tenant id (ten_...)"))
const environment = Options.choice("environment", ["sandbox", "production"]).pipe(
  Options.withDescription("The tenant's environment (production keys are sk_live_...)"),
  Options.withDefault("sandbox" as const)
)
const name = Options.text("name").pipe(Options.withDefault("first key"))
const scopes = Options.text("scopes").pipe(
  Options.withDescription("Comma-separated scopes; omit for the first key's quickstart abilities"),
  Options.optional
)

const applyPilot = Command.make(
  "apply-pilot",
  { url, organization, email, json },
  (o) =>
    Effect.flatMap(
      call(o.url, "POST", "/pilot-applications", { organization_name: o.organization, contact_email: o.email }),
      printer(o.json)
    )
).pipe(Command.withDescription("Submit a pilot application for an organization; prints the application"))

const approvePilot = Command.make(
  "approve-pilot",
  { url, json, id: Args.text({ name: "application-id" }) },
  (o) => Effect.flatMap(call(o.url, "POST", `/pilot-applications/${encodeURIComponent(o.id)}/approve`), printer(o.json))
).pipe(Command.withDescription("Approve a pilot application: makes its tenant and sandbox environment; prints them"))

const keyBody = (o: { name: string; scopes: Option.Option<string> }) => ({
  name: o.name,
  ...Option.match(o.scopes, { onNone: () => ({}), onSome: (s) => ({ scopes: s.split(",").map((x) => x.trim()).filter(Boolean) }) })
})

const createKey = Command.make(
  "create-key",
  { url, tenant, environment, name, scopes, json },
  (o) =>
    Effect.flatMap(
      call(o.url, "POST", `/tenants/${encodeURIComponent(o.tenant)}/environments/${o.environment}/api-keys`, keyBody(o)),
      printer(o.json)
    )
).pipe(Command.withDescription("Create an API key for a tenant's environment; its secret is printed once"))

const quickstartPath = (tenantId: string, env: string) => `/tenants/${encodeURIComponent(tenantId)}/environments/${env}/quickstart`

const quickstart = Command.make(
  "quickstart",
  { url, tenant, environment, json },
  (o) => Effect.flatMap(call(o.url, "GET", quickstartPath(o.tenant, o.environment)), printer(o.json))
).pipe(
  Command.withDescription("Print the environment's quickstart: service actor, workspace and no-tools agent revision")
)

// ---- production requests (D17) ------------------------------------------------------------------

const requestId = Args.text({ name: "request-id" }).pipe(Args.withDescription("Production request id (preq_...)"))
const reason = Options.text("reason").pipe(
  Options.withDescription("Why; recorded on the request and shown to the tenant"),
  Options.optional
)
const requestPath = (id: string) => `/production-requests/${encodeURIComponent(id)}`
const decisionBody = (o: { reason: Option.Option<string> }) =>
  Option.match(o.reason, { onNone: () => ({}), onSome: (r) => ({ reason: r }) })

/** A page of a list: each item as `key: value` lines, a blank line between (or `--json`: the page). */
const printPage = (asJson: boolean) => (page: { items: ReadonlyArray<unknown>; next_cursor: string | null }) =>
  asJson
    ? Console.log(JSON.stringify(page, null, 2))
    : Console.log(
      page.items.length === 0 ? "(none)" : page.items.map((item) => readable(item)).join("\n\n") +
        (page.next_cursor === null ? "" : `\n\n(more: --cursor ${page.next_cursor})`)
    )

const listProductionRequests = Command.make(
  "production-requests",
  {
    url,
    json,
    status: Options.choice("status", ["submitted", "approved", "rejected"]).pipe(
      Options.withDescription("Only requests of this status (submitted: waiting for a decision)"),
      Options.optional
    ),
    cursor: Options.text("cursor").pipe(Options.withDescription("The next page (the cursor a previous page printed)"), Options.optional)
  },
  (o) => {
    const query = new URLSearchParams()
    Option.map(o.status, (s) => query.set("status", s))
    Option.map(o.cursor, (c) => query.set("cursor", c))
    const search = query.toString() === "" ? "" : `?${query.toString()}`
    return Effect.flatMap(call(o.url, "GET", `/production-requests${search}`), printPage(o.json))
  }
).pipe(Command.withDescription("List production requests, newest first, with their tenants"))

const getProductionRequest = Command.make(
  "production-request",
  { url, json, id: requestId },
  (o) => Effect.flatMap(call(o.url, "GET", requestPath(o.id)), printer(o.json))
).pipe(Command.withDescription("Show a production request"))

const approveProduction = Command.make(
  "approve-production",
  { url, json, id: requestId },
  (o) =>
    Effect.gen(function*() {
      const approved = yield* call(o.url, "POST", `${requestPath(o.id)}/approve`)
      yield* printer(o.json)(approved)
      yield* Console.error(
        `\nThe production environment of ${approved.tenant_id} is ready, without keys. Make one with:\n` +
          `  npm run operator -- create-key --tenant ${approved.tenant_id} --environment production --name live`
      )
    })
).pipe(Command.withDescription("Approve a production request: provisions the tenant's production environment (no keys)"))

const rejectProduction = Command.make(
  "reject-production",
  { url, json, reason, id: requestId },
  (o) => Effect.flatMap(call(o.url, "POST", `${requestPath(o.id)}/reject`, decisionBody(o)), printer(o.json))
).pipe(Command.withDescription("Reject a production request; the tenant may submit a new one"))

const provisionSandbox = Command.make("provision-sandbox", { url, organization, email, name, scopes, json }, (o) =>
  Effect.gen(function*() {
    const application = yield* call(o.url, "POST", "/pilot-applications", { organization_name: o.organization, contact_email: o.email })
    const approval = yield* call(o.url, "POST", `/pilot-applications/${application.id}/approve`)
    const key = yield* call(o.url, "POST", `/tenants/${approval.tenant_id}/environments/sandbox/api-keys`, keyBody(o))
    const ids = yield* call(o.url, "GET", quickstartPath(approval.tenant_id, "sandbox"))
    yield* printer(o.json)({
      pilot_application_id: application.id,
      tenant_id: approval.tenant_id,
      environment: "sandbox",
      api_key: key,
      quickstart: ids
    })
    // For `npm run quickstart` in this DATA_DIR (mode 0600, as the operator token).
    yield* Effect.sync(() =>
      writeSandboxFile(dataDirOf(), {
        url: rootOf(o.url),
        tenant_id: approval.tenant_id,
        api_key: key.secret,
        workspace_id: ids.workspace_id,
        agent_revision_id: ids.agent_revision_id
      })
    )
    yield* Console.error(
      `\nThe key secret is shown once (also kept in ${dataDirOf()}/sandbox.json for npm run quickstart). Try:\n` +
        `  curl -H "Authorization: Bearer ${key.secret}" ${rootOf(o.url)}/v1/tenants`
    )
  })).pipe(
    Command.withDescription(
      "Apply, approve and make the first key in one go; prints the tenant, the key (secret once) and the quickstart ids"
    )
  )

const operator = Command.make("operator").pipe(
  Command.withDescription("Agent Platform operator plane"),
  Command.withSubcommands([
    provisionSandbox,
    applyPilot,
    approvePilot,
    createKey,
    quickstart,
    listProductionRequests,
    getProductionRequest,
    approveProduction,
    rejectProduction
  ])
)

const cli = Command.run(operator, { name: "agent-platform operator", version: "0.1.0" })

/** Off a terminal (piped, redirected) or with NO_COLOR, output is plain text: no ANSI escapes. */
const plain = !process.stdout.isTTY || (process.env.NO_COLOR ?? "") !== ""
const ANSI = /\x1b\[[0-9;]*m/g
const unstyled = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? a.replace(ANSI, "") : a))
const plainOf = (current: Console.Console): Console.Console => ({
  ...current,
  log: (...args) => current.log(...unstyled(args)),
  error: (...args) => current.error(...unstyled(args)),
  unsafe: {
    ...current.unsafe,
    log: (...args) => current.unsafe.log(...unstyled(args)),
    error: (...args) => current.unsafe.error(...unstyled(args))
  }
})

cli(process.argv).pipe(
  (program) => (plain ? Console.consoleWith((current) => Console.withConsole(program, plainOf(current))) : program),
  Effect.catchIf((e): e is CliError => e instanceof CliError, (e) =>
    Effect.zipRight(
      Console.error(e.message),
      Effect.sync(() => {
        process.exitCode = 1
      })
    )),
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain({ disableErrorReporting: false })
)
