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
 *   npm run operator -- pilot-application pilot_...
 *   npm run operator -- review-connection conn_... --decision approve
 *   npm run operator -- rotate-signing-key --tenant ten_... [--environment production]
 *   npm run operator -- quotas --tenant ten_... [--environment production]
 *   npm run operator -- set-quota --tenant ten_... runs_per_day 50000
 *   npm run operator -- settings --tenant ten_... [--environment production]
 *   npm run operator -- set-setting --tenant ten_... schedule_min_interval_seconds 10
 *   npm run operator -- run --tenant ten_... run_...
 *   npm run operator -- cell --tenant ten_...
 *   npm run operator -- cluster
 *   npm run operator -- create-operator --email ops@example.com
 *
 * Every command has `--help`; `--json` prints the answer as JSON for scripts; off a terminal the
 * output is plain text.
 */
import { Args, Command, Options } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Option } from "effect"

import { QUOTA_NAMES } from "../Domain/Quotas.js"
import { call, CliError, json, plain, plainOf, printer, printPage, rootOf, url } from "./CliSupport.js"
import { dataDirOf, writeSandboxFile } from "./LocalFiles.js"

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

// ---- pilots, connections, signing keys, runs and cells (D1, D10, D17) ------------------------------

const getPilot = Command.make(
  "pilot-application",
  { url, json, id: Args.text({ name: "application-id" }).pipe(Args.withDescription("Pilot application id (pilot_...)")) },
  (o) => Effect.flatMap(call(o.url, "GET", `/pilot-applications/${encodeURIComponent(o.id)}`), printer(o.json))
).pipe(Command.withDescription("Show a pilot application and its status"))

const reviewConnection = Command.make(
  "review-connection",
  {
    url,
    json,
    decision: Options.choice("decision", ["approve", "reject"]).pipe(
      Options.withDescription("approve: its operations become tools the tenant can use; reject: they do not")
    ),
    id: Args.text({ name: "connection-id" }).pipe(Args.withDescription("Connection id (conn_...)"))
  },
  (o) =>
    Effect.flatMap(
      call(o.url, "POST", `/connections/${encodeURIComponent(o.id)}/review`, { decision: o.decision }),
      printer(o.json)
    )
).pipe(Command.withDescription("Review a tenant's connection (its OpenAPI operations): approve or reject; prints the connection"))

const cellPath = (o: { tenant: string; environment: string }) => `/tenants/${encodeURIComponent(o.tenant)}/environments/${o.environment}`

const rotateSigningKey = Command.make(
  "rotate-signing-key",
  { url, json, tenant, environment },
  (o) => Effect.flatMap(call(o.url, "POST", `${cellPath(o)}/signing-keys/rotate`), printer(o.json))
).pipe(
  Command.withDescription(
    "Rotate the environment's tool-invocation signing key: new tokens are signed with a new key; the retired key stays in " +
      "the public key set until retired_publish_until"
  )
)

const getRun = Command.make(
  "run",
  { url, json, tenant, environment, id: Args.text({ name: "run-id" }).pipe(Args.withDescription("Run id (run_...)")) },
  (o) => Effect.flatMap(call(o.url, "GET", `${cellPath(o)}/runs/${encodeURIComponent(o.id)}`), printer(o.json))
).pipe(Command.withDescription("Show any run of a tenant's environment (support; a deleted environment's until its purge)"))

const cellStats = Command.make(
  "cell",
  { url, json, tenant, environment },
  (o) => Effect.flatMap(call(o.url, "GET", `${cellPath(o)}/cell`), printer(o.json))
).pipe(
  Command.withDescription(
    "Show what the environment's cell holds now: generation, running and parked runs, open streams, and its share of the node that answered (weight; per resource: in use, waiting, grants, seconds waited)"
  )
)

const setWeight = Command.make(
  "set-weight",
  {
    url,
    json,
    tenant,
    environment,
    weight: Args.text({ name: "weight" }).pipe(
      Args.withDescription("The cell's weight (> 0, at most 1000; 2 gets two turns for one of weight 1 when both wait), or `default`")
    )
  },
  (o) =>
    Effect.flatMap(
      call(o.url, "PUT", `${cellPath(o)}/share`, {
        // not a number: sent as given, for the service's 400 to name it
        weight: o.weight === "default" ? null : o.weight.trim() !== "" && Number.isFinite(Number(o.weight)) ? Number(o.weight) : o.weight
      }),
      printer(o.json)
    )
).pipe(
  Command.withDescription("Set the environment's weight in the node's fair shares (issue 36); `default` goes back to CELL_WEIGHTS or 1")
)

const cluster = Command.make(
  "cluster",
  { url, json },
  (o) => Effect.flatMap(call(o.url, "GET", "/cluster"), printer(o.json))
).pipe(Command.withDescription("Show the cluster: its runners (address, healthy, last heartbeat) and which runner each active cell is on"))

// ---- quotas (D16) --------------------------------------------------------------------------------

const quotas = Command.make(
  "quotas",
  { url, json, tenant, environment },
  (o) => Effect.flatMap(call(o.url, "GET", `${cellPath(o)}/quotas`), printPage(o.json))
).pipe(Command.withDescription("List the environment's quotas: name, limit, used, window, resets_at"))

const setQuota = Command.make(
  "set-quota",
  {
    url,
    json,
    tenant,
    environment,
    name: Args.choice(QUOTA_NAMES.map((n) => [n, n] as const), { name: "quota" }).pipe(
      Args.withDescription(`The quota: ${QUOTA_NAMES.join(", ")}`)
    ),
    limit: Args.integer({ name: "limit" }).pipe(
      Args.withDescription("The new limit, a whole number from 0 (nothing more is admitted); applies to the next admission or upload")
    )
  },
  (o) => Effect.flatMap(call(o.url, "PUT", `${cellPath(o)}/quotas/${o.name}`, { limit: o.limit }), printer(o.json))
).pipe(Command.withDescription("Set a quota's limit for a tenant's environment; prints the quota"))

// ---- settings (D20) -------------------------------------------------------------------------------

const SETTING_NAMES = ["audit_retention_days", "schedule_min_interval_seconds"] as const

const settings = Command.make(
  "settings",
  { url, json, tenant, environment },
  (o) => Effect.flatMap(call(o.url, "GET", `${cellPath(o)}/settings`), printer(o.json))
).pipe(Command.withDescription("Show the environment's settings, as its keys see them"))

const setSetting = Command.make(
  "set-setting",
  {
    url,
    json,
    tenant,
    environment,
    name: Args.choice(SETTING_NAMES.map((n) => [n, n] as const), { name: "setting" }).pipe(
      Args.withDescription("audit_retention_days (7..3650, lower or higher) or schedule_min_interval_seconds (1..3600)")
    ),
    value: Args.integer({ name: "value" })
  },
  (o) => Effect.flatMap(call(o.url, "PATCH", `${cellPath(o)}/settings`, { [o.name]: o.value }), printer(o.json))
).pipe(Command.withDescription("Set a setting a key cannot lower or set, for a tenant's environment (audited); prints the settings"))

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

// ---- operator accounts (issue 39) ----------------------------------------------------------------

const createOperator = Command.make(
  "create-operator",
  { url, json, email: Options.text("email").pipe(Options.withDescription("The operator's email address")) },
  (o) =>
    Effect.gen(function*() {
      const account = yield* call(o.url, "POST", "/operator-accounts", { email: o.email })
      yield* printer(o.json)(account)
      yield* Console.error(
        `\nThe password is shown once: hand it to the operator, who signs in at ${rootOf(o.url)}${account.sign_in}\n` +
          `and sets up two-factor authentication (TOTP) before any operator page opens.`
      )
    })
).pipe(Command.withDescription("Create an operator's console account; prints its password once"))

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
    rejectProduction,
    getPilot,
    reviewConnection,
    rotateSigningKey,
    quotas,
    setQuota,
    settings,
    setSetting,
    getRun,
    cellStats,
    setWeight,
    cluster,
    createOperator
  ])
)

const cli = Command.run(operator, { name: "agent-platform operator", version: "0.1.0" })

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
