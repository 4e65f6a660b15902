/**
 * The console (issue 38) as a new customer uses it, in a real browser (playwright-core driving
 * Debian's Chromium, one launch) at 375 px wide, against the real service and a real SMTP server
 * on 127.0.0.1 (smtp-server): sign up, read the verification mail, verify, sign in, enrol TOTP
 * (codes computed here), create the organization, apply, the operator approves (operator API), the
 * sandbox shows Ready, create the first key, run the quickstart with it to `succeeded`, onboarding
 * complete. axe-core checks every page (no serious or critical violation) and that nothing is wider
 * than the screen. On the way, the refusals a customer can meet in the browser: a link used twice, a
 * wrong TOTP code, a form whose CSRF token was removed (expired links, another organization's pages
 * and the sign-in limits are in test/Console.Http.test.ts). Then the operator console (issue 39) in
 * its own context: an operator enrols TOTP, approves and rejects a pilot application and a
 * production request, edits a quota on a tenant's page, opens the cluster; neither console's
 * session opens the other's pages. With CONSOLE_SCREENSHOTS=1 each step is saved to docs/console/*.png.
 */
import { AxeBuilder } from "@axe-core/playwright"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as OTPAuth from "otpauth"
import { type Browser, chromium, type Page } from "playwright-core"
import { SMTPServer } from "smtp-server"

import { defaultConsoleConfig } from "../src/Config/AppConfig.js"
import { makeTestApp, OPERATOR_TOKEN, TestApp } from "./support/App.js"
import { CHROMIUM, CHROMIUM_ARGS } from "./support/Chromium.js"
import { quickstartRun } from "./support/Console.js"
import { TOOL_SCOPES } from "./support/Sandboxes.js"
import { freePort } from "./support/Server.js"
import { connectionBody } from "./support/ToolHost.js"
import { toolSettings } from "./support/ToolSandbox.js"

const SHOTS = process.env["CONSOLE_SCREENSHOTS"] === "1"
  ? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../docs/console")
  : undefined

/** A real SMTP peer: every message it accepted, as text. */
const smtp = Effect.acquireRelease(
  Effect.promise(async () => {
    const port = await freePort()
    const mails: Array<string> = []
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ["STARTTLS", "AUTH"],
      logger: false,
      onData(stream, _session, callback) {
        let text = ""
        stream.on("data", (c: Buffer) => (text += c.toString("utf8")))
        stream.on("end", () => {
          mails.push(text)
          callback()
        })
      }
    })
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
    return { port, mails, server }
  }),
  ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
)

const browserOf = Effect.acquireRelease(
  Effect.promise(() => chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS })),
  (browser: Browser) => Effect.promise(() => browser.close())
)

/** axe on the page (no serious or critical violation), nothing wider than 375 px, and its screenshot. */
const checked = async (page: Page, name: string, maxWidth = 375) => {
  const result = await new AxeBuilder({ page }).analyze()
  const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical")
  expect(serious.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`), name).toEqual([])
  const width = await page.evaluate<number>("document.documentElement.scrollWidth")
  expect(width, `${name} is wider than the screen`).toBeLessThanOrEqual(maxWidth)
  if (SHOTS !== undefined) {
    fs.mkdirSync(SHOTS, { recursive: true })
    await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true })
  }
}

const waitFor = async <A>(what: string, find: () => A | undefined, ms = 10_000): Promise<A> => {
  const deadline = Date.now() + ms
  for (;;) {
    const found = find()
    if (found !== undefined) return found
    if (Date.now() > deadline) throw new Error(`no ${what} within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** The TOTP key the enrolment page shows, as a secret. */
const OPERATOR_TOTP = (shown: string | null) => OTPAuth.Secret.fromBase32(shown!.replace(/\s/g, ""))

const EMAIL = "grace@example.test"
const PASSWORD = "a long and memorable passphrase"

describe("console in a browser (issue 38)", () => {
  it.live("sign-up to onboarding complete, at 375 px, every page accessible", () =>
    Effect.scoped(Effect.gen(function*() {
      const mail = yield* smtp
      const browser = yield* browserOf
      yield* Effect.gen(function*() {
        const app = yield* TestApp
        yield* Effect.promise(async () => {
          const context = await browser.newContext({ viewport: { width: 375, height: 812 } })
          const page = await context.newPage()
          const base = app.baseUrl

          await page.goto(`${base}/console/sign-up`)
          await checked(page, "01-sign-up")
          await page.getByLabel("Email address").fill(EMAIL)
          await page.getByLabel(/^Password/).fill(PASSWORD)
          await page.getByRole("button", { name: "Create account" }).click()
          await page.getByText("We sent a link").waitFor()
          await checked(page, "02-check-your-mail")

          const message = await waitFor("verification mail", () => mail.mails.find((m) => m.includes(EMAIL)))
          const link = /(http:\/\/\S+\/console\/verify\?token=\S+)/.exec(message.replace(/=\r?\n/g, "").replace(/=3D/g, "="))![1]!
          await page.goto(link)
          await checked(page, "03-verify")
          await page.getByRole("button", { name: "Verify my address" }).click()
          await page.getByText("Your address is verified").waitFor()
          // a link works once
          await page.goto(link)
          await page.getByRole("button", { name: "Verify my address" }).click()
          await page.getByText("This link was used already").waitFor()

          await page.goto(`${base}/console/sign-in`)
          await checked(page, "04-sign-in")
          await page.getByLabel("Email address").fill(EMAIL)
          await page.getByLabel("Password").fill(PASSWORD)
          await page.getByRole("button", { name: "Sign in" }).click()
          await page.getByRole("heading", { name: "Welcome" }).waitFor()
          await checked(page, "05-welcome")

          await page.getByRole("link", { name: "Set up two-factor authentication" }).click()
          const key = (await page.locator("code").first().textContent())!.replace(/\s/g, "")
          await checked(page, "06-two-factor")
          const secret = OTPAuth.Secret.fromBase32(key)
          // a wrong code is refused, and the same key is shown again
          const right = OTPAuth.TOTP.generate({ secret })
          await page.getByLabel(/Six-digit code/).fill(right === "000000" ? "000001" : "000000")
          await page.getByRole("button", { name: "Turn on two-factor authentication" }).click()
          await page.getByText("That code is not right").waitFor()
          expect((await page.locator("code").first().textContent())!.replace(/\s/g, "")).toBe(key)
          await page.getByLabel(/Six-digit code/).fill(right)
          await page.getByRole("button", { name: "Turn on two-factor authentication" }).click()
          await page.getByRole("heading", { name: "Save your recovery codes" }).waitFor()
          await checked(page, "07-recovery-codes")

          await page.getByRole("link", { name: "Continue" }).click()
          // a form without its CSRF token is refused (403), and nothing is created
          await page.getByLabel("Organization name").fill("Forged Labs")
          await page.evaluate("document.querySelectorAll('input[name=csrf]').forEach((e) => e.remove())")
          const [forged] = await Promise.all([
            page.waitForResponse((r) => r.request().method() === "POST"),
            page.getByRole("button", { name: "Create organization" }).click()
          ])
          expect(forged.status()).toBe(403)
          await page.getByText("did not come from this console").waitFor()
          await page.goto(`${base}/console`)
          await page.getByRole("heading", { name: "Welcome" }).waitFor()
          await page.getByLabel("Organization name").fill("Hopper Labs")
          await page.getByRole("button", { name: "Create organization" }).click()
          await page.getByRole("heading", { name: "Hopper Labs" }).waitFor()
          await page.getByRole("button", { name: "Apply for a pilot" }).click()
          await page.getByText(/pilot_\w+: submitted/).waitFor()
          await checked(page, "08-applied")

          const pilotId = /(pilot_\w+): submitted/.exec(await page.content())![1]!
          const approved = await fetch(`${base}/operator/v1/pilot-applications/${pilotId}/approve`, {
            method: "POST",
            headers: { authorization: `Bearer ${OPERATOR_TOKEN}` }
          })
          expect(approved.status).toBe(200)
          const tenantId = ((await approved.json()) as { tenant_id: string }).tenant_id
          await page.reload()
          await page.getByText("Ready", { exact: true }).waitFor()
          await checked(page, "09-sandbox-ready")

          await page.getByRole("link", { name: "Create a key" }).click()
          await checked(page, "10-create-key")
          // the next step's code: a code works once, and the enrolment spent this one
          await page.getByLabel("Current two-factor code").fill(OTPAuth.TOTP.generate({ secret, timestamp: Date.now() + 30_000 }))
          const [created] = await Promise.all([
            page.waitForResponse((r) => r.url().endsWith("/keys") && r.request().method() === "POST"),
            page.getByRole("button", { name: "Create key" }).click()
          ])
          expect(created.status()).toBe(201)
          expect(created.headers()["cache-control"]).toBe("no-store")
          const keySecret = (await page.locator("#secret").textContent())!
          expect(keySecret).toMatch(/^sk_test_/)
          await checked(page, "11-key-shown-once")
          // never in the browser's storage
          const stored = await page.evaluate<string>("JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage })")
          expect(stored).not.toContain(keySecret)

          await page.getByRole("link", { name: "Run the quickstart with it" }).click()
          await checked(page, "12-quickstart")
          const text = await page.content()
          const ws = /<dt>Workspace<\/dt><dd>(ws_\w+)<\/dd>/.exec(text)![1]!
          const rev = /<dt>Agent revision<\/dt><dd>(rev_\w+)<\/dd>/.exec(text)![1]!
          const { run } = await quickstartRun(base, tenantId, keySecret, ws, rev)
          expect(run.data.status, JSON.stringify(run)).toBe("succeeded")

          await page.getByRole("link", { name: "Back to your organization" }).click()
          await page.getByText("Onboarding complete").waitFor()
          await checked(page, "13-onboarding-complete")

          // ---- the operator console (issue 39), in its own browser context, 1280 px wide ----
          const api = async (method: string, url: string, body?: unknown, key = OPERATOR_TOKEN) => {
            const r = await fetch(`${base}${url}`, {
              method,
              headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
              ...(body === undefined ? {} : { body: JSON.stringify(body) })
            })
            return { status: r.status, body: (await r.json()) as Record<string, any> }
          }
          const made = await api("POST", "/operator/v1/operator-accounts", { email: "ops@platform.test" })
          expect(made.status).toBe(201)
          const opsContext = await browser.newContext({ viewport: { width: 1280, height: 900 } })
          const ops = await opsContext.newPage()
          const O = `${base}/operator/console`
          await ops.goto(`${O}/sign-in`)
          await checked(ops, "op-01-sign-in", 1280)
          await ops.getByLabel("Email address").fill("ops@platform.test")
          await ops.getByLabel("Password").fill(made.body["password"] as string)
          await ops.getByRole("button", { name: "Sign in" }).click()
          await ops.getByRole("heading", { name: "Set up two-factor authentication" }).waitFor()
          const opsKey = OPERATOR_TOTP(await ops.locator("code").first().textContent())
          await ops.getByLabel(/Six-digit code/).fill(OTPAuth.TOTP.generate({ secret: opsKey }))
          await ops.getByRole("button", { name: "Turn on two-factor authentication" }).click()
          await ops.getByRole("heading", { name: "Save your recovery codes" }).waitFor()

          // pilot applications: one approved, one rejected with a reason
          for (const name of ["Lovelace Ltd", "Babbage Co"]) {
            expect((await api("POST", "/operator/v1/pilot-applications", { organization_name: name, contact_email: "x@y.test" })).status)
              .toBe(201)
          }
          await ops.goto(`${O}/pilots`)
          await checked(ops, "op-02-pilots", 1280)
          await ops.getByRole("button", { name: "Approve Lovelace Ltd" }).click()
          await ops.getByRole("region", { name: "Lovelace Ltd" }).getByText("approved", { exact: true }).waitFor()
          await ops.goto(`${O}/pilots`)
          const babbage = ops.getByRole("region", { name: "Babbage Co" })
          await babbage.getByLabel("Reason of a rejection").fill("Not a fit yet")
          await babbage.getByRole("button", { name: "Reject Babbage Co" }).click()
          await ops.getByText("Not a fit yet").waitFor()

          // production requests: the customer's approved, the pilot's rejected with a reason
          const pilots = await ops.goto(`${O}/pilots?status=approved`)
          expect(pilots!.status()).toBe(200)
          const lovelaceTenant = /<dt>Tenant<\/dt><dd>(ten_\w+)<\/dd>/.exec(
            await ops.getByRole("region", { name: "Lovelace Ltd" }).innerHTML()
          )![1]!
          const requestOf = async (t: string) => {
            const k = await api("POST", `/operator/v1/tenants/${t}/environments/sandbox/api-keys`, {
              name: "requester",
              scopes: ["environments:read", "environments:write"]
            })
            const body = { use_case: `Support of ${t}`, expected_monthly_runs: 1000, contact_email: "ops@acme.test" }
            const r = await api("POST", `/v1/tenants/${t}/environments/sandbox/production-request`, body, k.body["secret"] as string)
            expect(r.status, JSON.stringify(r.body)).toBe(201)
          }
          await requestOf(tenantId)
          await requestOf(lovelaceTenant)
          await ops.goto(`${O}/production`)
          await checked(ops, "op-03-production-requests", 1280)
          await ops.getByRole("button", { name: `Approve ${tenantId}` }).click()
          await ops.getByText("1 approved requests.").waitFor()
          await ops.goto(`${O}/production`)
          await ops.getByLabel("Reason of a rejection").fill("Too early")
          await ops.getByRole("button", { name: `Reject ${lovelaceTenant}` }).click()
          await ops.getByText("Too early").waitFor()

          // connections pending review: one approved, one rejected with a reason
          const manager = await api("POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, {
            name: "manager",
            scopes: TOOL_SCOPES
          })
          const connections: Record<string, string> = {}
          for (const name of ["Orders", "Refunds"]) {
            const r = await api(
              "POST",
              `/v1/tenants/${tenantId}/environments/sandbox/connections`,
              { ...connectionBody("https://127.0.0.1:9"), name },
              manager.body["secret"] as string
            )
            expect(r.status, JSON.stringify(r.body)).toBe(201)
            connections[name] = r.body["data"]["id"] as string
          }
          await ops.goto(`${O}/connections`)
          await ops.getByText("2 pending review.").waitFor()
          await checked(ops, "op-04-connections", 1280)
          await ops.getByRole("button", { name: "Approve Orders" }).click()
          await ops.getByText("1 pending review.").waitFor()
          const refunds = ops.getByRole("region", { name: "Refunds" })
          await refunds.getByLabel("Reason of a rejection").fill("Refunds need a limit")
          await refunds.getByRole("button", { name: "Reject Refunds" }).click()
          await ops.getByText("0 pending review.").waitFor()
          const statusOf = async (name: string) =>
            (await api(
              "GET",
              `/v1/tenants/${tenantId}/environments/sandbox/connections/${connections[name]}`,
              undefined,
              manager.body["secret"] as string
            )).body["data"]["status"]
          expect([await statusOf("Orders"), await statusOf("Refunds")]).toEqual(["active", "rejected"])

          // tenants, a tenant's page and its quota edit, the cluster
          await ops.goto(`${O}/tenants`)
          await checked(ops, "op-05-tenants", 1280)
          await ops.getByRole("link", { name: "Hopper Labs" }).click()
          await ops.getByRole("heading", { name: "Tenant Hopper Labs" }).waitFor()
          await checked(ops, "op-06-tenant", 1280)
          expect(await ops.content()).not.toContain(keySecret)
          await ops.getByLabel("Limit of runs_per_day (sandbox)").fill("42")
          await ops.getByRole("region", { name: "Environment sandbox" }).getByRole("button", { name: "Set" }).first().click()
          await ops.getByRole("heading", { name: "Tenant Hopper Labs" }).waitFor()
          expect(await ops.getByLabel("Limit of runs_per_day (sandbox)").inputValue()).toBe("42")
          const quotas = await api("GET", `/operator/v1/tenants/${tenantId}/environments/sandbox/quotas`)
          expect((quotas.body["items"] as Array<{ name: string; limit: number }>).find((q) => q.name === "runs_per_day")!.limit).toBe(42)
          await ops.goto(`${O}/cluster`)
          await checked(ops, "op-07-cluster", 1280)
          await ops.goto(`${O}/metrics`)
          await ops.getByRole("img", { name: /^Active runs per cell/ }).waitFor()
          await checked(ops, "op-08-metrics", 1280)

          // a customer's session opens no operator page, an operator's no customer page
          await page.goto(`${O}/pilots`)
          expect(new URL(page.url()).pathname).toBe("/operator/console/sign-in")
          await ops.goto(`${base}/console`)
          expect(new URL(ops.url()).pathname).toBe("/console/sign-in")
          await opsContext.close()
          await context.close()
        })
      }).pipe(Effect.provide(makeTestApp({
        ...toolSettings(),
        console: { ...defaultConsoleConfig, smtpUrl: Option.some(Redacted.make(`smtp://127.0.0.1:${mail.port}`)) }
      })))
    })), 180_000) // 51 s alone; 95 s beside the three-node cluster tests in a CI run (the other worker)
})
