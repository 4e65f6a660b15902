/**
 * `npm run check:docs`: `/docs` as a person sees it, in headless Chromium (Debian's `chromium`,
 * driven by playwright-core; `CHROMIUM` names another binary). Starts the service from the sources
 * on a free port with its own embedded Postgres in a temporary DATA_DIR, provisions a sandbox key
 * through the operator API, then checks, and exits 1 on the first failed check:
 * - the page renders with no script error and loads nothing from another origin;
 * - every tag is in the sidebar, rows are operation summaries (no raw `/v1/...` paths);
 * - bearer authentication (`ServiceKey`) is preselected;
 * - with the key pasted once, "Test Request" -> "Send" on "List tenants" sends
 *   `Authorization: Bearer <key>` and gets 200.
 * Screenshots go to DOCS_CHECK_DIR (default `.data/docs-check/`). Not part of `npm test`: CI has no
 * browser; run it after changing the OpenAPI document or the Scalar configuration.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { chromium } from "playwright-core"

import { CHROMIUM, CHROMIUM_ARGS } from "../test/support/Chromium.js"
import { freePort } from "../test/support/Server.js"

const ROOT = path.resolve(import.meta.dirname, "..")
const OUT = path.resolve(process.env["DOCS_CHECK_DIR"] ?? path.join(ROOT, ".data", "docs-check"))

const check = (ok: boolean, what: string, detail = "") => {
  if (!ok) throw new Error(`FAILED: ${what}${detail ? `\n${detail}` : ""}`)
  console.log(`ok   ${what}`)
}

/** The service from the sources (current code, no build), resolved once it listens. */
const startService = async (dataDir: string, port: number) => {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir }
  delete env["DATABASE_URL"]
  delete env["OPERATOR_TOKEN"]
  delete env["PUBLIC_BASE_URL"]
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout!.on("data", (c: Buffer) => (output += c.toString()))
  child.stderr!.on("data", (c: Buffer) => (output += c.toString()))
  const deadline = Date.now() + 90_000
  while (!output.includes("listening on")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the service did not start:\n${output}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  return child
}

const stopService = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve()
    child.once("exit", () => resolve())
    child.kill("SIGTERM")
  })

/** A sandbox key, as a new customer gets one: pilot application, approval, key. */
const provisionKey = async (base: string, operatorToken: string): Promise<string> => {
  const call = async (method: string, url: string, body?: unknown) => {
    const res = await fetch(`${base}${url}`, {
      method,
      headers: { authorization: `Bearer ${operatorToken}`, ...(body ? { "content-type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {})
    })
    if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${await res.text()}`)
    return (await res.json()) as Record<string, any>
  }
  const application = await call("POST", "/operator/v1/pilot-applications", {
    organization_name: "Docs Check",
    contact_email: "docs@check.test"
  })
  const approved = await call("POST", `/operator/v1/pilot-applications/${application["id"]}/approve`)
  const key = await call("POST", `/operator/v1/tenants/${approved["tenant_id"]}/environments/sandbox/api-keys`, { name: "docs" })
  return key["secret"] as string
}

const main = async () => {
  fs.mkdirSync(OUT, { recursive: true })
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "docs-check-"))
  fs.chmodSync(dataDir, 0o755) // the postgres user must reach DATA_DIR/pg when running as root
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  const service = await startService(dataDir, port)
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS })
  try {
    const key = await provisionKey(base, fs.readFileSync(path.join(dataDir, "operator-token"), "utf8").trim())
    const doc = (await (await fetch(`${base}/v1/openapi.json`)).json()) as { tags: Array<{ name: string }> }

    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } })
    const errors: Array<string> = []
    const foreign: Array<string> = []
    page.on("pageerror", (e) => errors.push(String(e)))
    page.on("request", (r) => {
      if (!r.url().startsWith(base) && !r.url().startsWith("data:")) foreign.push(r.url())
    })
    const sent: Array<{ url: string; authorization: string | undefined; status: Promise<number | undefined> }> = []
    page.on("request", (r) => {
      if (new URL(r.url()).pathname === "/v1/tenants") {
        sent.push({ url: r.url(), authorization: r.headers()["authorization"], status: r.response().then((x) => x?.status()) })
      }
    })

    await page.goto(`${base}/docs`, { waitUntil: "load" })
    await page.getByText("Selected Auth Type").first().waitFor({ timeout: 30_000 })
    await page.waitForLoadState("networkidle")
    await page.screenshot({ path: path.join(OUT, "docs.png") })
    console.log(`     ${path.join(OUT, "docs.png")}`)

    const sidebar = await page.locator("nav, aside").first().innerText()
    const text = await page.locator("body").innerText()
    check(errors.length === 0, "the page renders without script errors", errors.join("\n"))
    const missing = doc.tags.map((t) => t.name).filter((name) => !sidebar.includes(name))
    check(missing.length === 0, `the sidebar lists all ${doc.tags.length} tags`, `missing: ${missing.join(", ")}`)
    check(sidebar.includes("List tenants") && !/\/v1\//.test(sidebar), "sidebar rows are operation summaries, not raw paths")
    check(/Selected Auth Type:\s*ServiceKey/.test(text), "bearer authentication (ServiceKey) is preselected")

    await page.getByPlaceholder("Token").first().fill(key)
    await page.getByText("List tenants").first().click()
    await page.getByRole("button", { name: "Test Request" }).first().click()
    await page.getByRole("button", { name: /^Send get request/ }).first().click()
    const deadline = Date.now() + 15_000
    while (sent.length === 0 && Date.now() < deadline) await page.waitForTimeout(100)
    const request = sent[0]
    check(request !== undefined, "Test Request -> Send calls GET /v1/tenants")
    check(request!.authorization === `Bearer ${key}`, "the pasted key is sent as Authorization: Bearer", String(request!.authorization))
    check((await request!.status) === 200, "the API answers 200")
    await page.getByText("200 OK").first().waitFor({ timeout: 10_000 })
    await page.screenshot({ path: path.join(OUT, "test-request.png") })
    console.log(`     ${path.join(OUT, "test-request.png")}`)
    check(foreign.length === 0, "nothing is loaded from another origin", foreign.join("\n"))
  } finally {
    await browser.close()
    await stopService(service)
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e)
  process.exit(1)
})
