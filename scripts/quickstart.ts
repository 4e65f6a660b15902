/**
 * The first-run path of contract part 1, over HTTP only, as a new customer's server does it (the
 * /v1 calls through the typed client, `agent-platform/client`):
 * create a conversation on the quickstart revision, start a run, stream its events, read the run
 * (it must be `succeeded`) and the usage.
 *
 *   npm run quickstart                      # against the server of `npm start` (same DATA_DIR)
 *
 * With AGENT_PLATFORM_KEY, TENANT_ID, WORKSPACE_ID and AGENT_REVISION_ID set (the key and the
 * quickstart ids a console shows), it does only the customer's part. Otherwise it uses the sandbox
 * `npm run operator -- provision-sandbox` made last (DATA_DIR/sandbox.json), and without one it
 * first plays the console: with the operator token (OPERATOR_TOKEN, else DATA_DIR/operator-token)
 * it applies for a pilot, approves it, makes the first key and reads the quickstart ids.
 * AGENT_PLATFORM_URL defaults to the service running on DATA_DIR (DATA_DIR/service.json), else
 * http://127.0.0.1:$PORT (8080). Exits 1 unless the run succeeded.
 */
import { FetchHttpClient } from "@effect/platform"
import { Effect, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as AgentPlatformClient from "../src/Client/index.js"
import { dataDirOf, readSandboxFile, serviceUrl } from "../src/Operator/LocalFiles.js"

const base = serviceUrl(process.env.AGENT_PLATFORM_URL)

const fail = (message: string): never => {
  console.error(message)
  process.exit(1)
}

/** A call of the operator plane (the customer's /v1 calls go through the typed client). */
const call = async (method: string, url: string, token: string, body?: unknown) => {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {})
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  }).catch((e) => fail(`Cannot reach ${base}: ${String(e)}. Is the service running (npm start)?`))
  const json: any = await res.json().catch(() => ({}))
  if (!res.ok) fail(`${method} ${url} -> ${res.status} ${JSON.stringify(json)}`)
  return { status: res.status, json, headers: res.headers }
}

interface Customer {
  key: string
  tenantId: string
  workspaceId: string
  revisionId: string
}

/** The console's part (operator plane): only when the customer's ids are not given. */
const playConsole = async (): Promise<Customer> => {
  const tokenFile = path.join(dataDirOf(), "operator-token")
  const token = process.env.OPERATOR_TOKEN || (fs.existsSync(tokenFile) ? fs.readFileSync(tokenFile, "utf8").trim() : "")
  if (!token) fail("Set AGENT_PLATFORM_KEY, TENANT_ID, WORKSPACE_ID, AGENT_REVISION_ID, or OPERATOR_TOKEN / DATA_DIR")
  console.log("console: applying for a pilot, approving it, creating the first key")
  const application = await call("POST", "/operator/v1/pilot-applications", token, {
    organization_name: "Quickstart Co",
    contact_email: "quickstart@example.com"
  })
  const approval = await call("POST", `/operator/v1/pilot-applications/${application.json.id}/approve`, token)
  const tenantId: string = approval.json.tenant_id
  const key = await call("POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, token, { name: "first key" })
  const quickstart = await call("GET", `/operator/v1/tenants/${tenantId}/environments/sandbox/quickstart`, token)
  return { key: key.json.secret, tenantId, workspaceId: quickstart.json.workspace_id, revisionId: quickstart.json.agent_revision_id }
}

/** The sandbox `provision-sandbox` made on this DATA_DIR for this service, if any. */
const provisioned = (): Customer | undefined => {
  const sandbox = readSandboxFile(dataDirOf(), base)
  if (sandbox === undefined) return undefined
  console.log(`using the sandbox provision-sandbox made (tenant ${sandbox.tenant_id}, ${dataDirOf()}/sandbox.json)`)
  return { key: sandbox.api_key, tenantId: sandbox.tenant_id, workspaceId: sandbox.workspace_id, revisionId: sandbox.agent_revision_id }
}

/** Runs one call of the typed client; exits 1 with its error (the D3 envelope's code and message). */
const customerCall = <A, E>(what: string, effect: Effect.Effect<A, E>): Promise<A> =>
  Effect.runPromise(Effect.either(effect)).then((result) => {
    if (result._tag === "Right") return result.right
    const error: any = result.left
    if (error?._tag === "RequestError") fail(`Cannot reach ${base}: ${String(error)}. Is the service running (npm start)?`)
    return fail(`${what} -> ${error?._tag ?? "error"} ${error?.code ?? ""} ${error?.message ?? String(error)}`)
  })

const main = async () => {
  const given = process.env.AGENT_PLATFORM_KEY
  const customer: Customer = given
    ? {
      key: given,
      tenantId: process.env.TENANT_ID ?? fail("TENANT_ID is required with AGENT_PLATFORM_KEY"),
      workspaceId: process.env.WORKSPACE_ID ?? fail("WORKSPACE_ID is required with AGENT_PLATFORM_KEY"),
      revisionId: process.env.AGENT_REVISION_ID ?? fail("AGENT_REVISION_ID is required with AGENT_PLATFORM_KEY")
    }
    : provisioned() ?? await playConsole()
  const client = await Effect.runPromise(
    AgentPlatformClient.make({ baseUrl: base, apiKey: customer.key, tenantId: customer.tenantId, environment: "sandbox" })
      .pipe(Effect.provide(FetchHttpClient.layer))
  )
  const conversation = await customerCall(
    "createConversation",
    client.conversations.createConversation({
      payload: { workspace_id: customer.workspaceId, agent_revision_id: customer.revisionId }
    })
  )
  console.log(`conversation ${conversation.id}`)
  const [admitted, response] = await customerCall(
    "createRun",
    client.runs.createRun({
      path: { conversation_id: conversation.id },
      payload: { input: [{ type: "text", text: "Hello, platform!" }] },
      withResponse: true
    })
  )
  const run = "_tag" in admitted ? admitted.run : admitted
  console.log(`run ${run.id}: ${response.status} ${run.status} (Location: ${response.headers["location"]})`)
  // Prints the events of the SSE stream until it ends (after the terminal event).
  await customerCall(
    "streamRunEvents",
    Stream.runForEach(client.streamRunEvents(run.id), (event) =>
      Effect.sync(() => {
        const detail = event.type === "run.message" ? ` ${JSON.stringify(event.data.content)}` : ""
        console.log(`  event ${event.sequence} ${event.type}${detail}`)
      }))
  )
  const final = await customerCall("getRun", client.runs.getRun({ path: { run_id: run.id } }))
  console.log(`run ${final.id}: ${final.status}`)
  console.log(`output: ${JSON.stringify(final.output)}`)
  const usage = await customerCall("getUsage", client.usage.getUsage())
  console.log(`usage: ${JSON.stringify(usage.totals)}`)
  if (final.status !== "succeeded") fail(`the run ended ${final.status}: ${final.status_reason}`)
}

await main()
