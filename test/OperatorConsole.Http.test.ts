/**
 * The operator console (issue 39) over plain HTTP against the real service: an operator account
 * made through the operator plane (what `create-operator` calls), its first sign-in with TOTP
 * enrolment before any page, the pilot applications queue (counts, filter) with an approval and a
 * rejection (a reason required) that name the operator account, and the separation of the two
 * consoles' sessions both ways.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { browser, codeAt, enrolled, now, PASSWORD, signedUp } from "./support/Console.js"
import { expectSingle } from "./support/Envelopes.js"
import { TOOL_SCOPES } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { toolSettings } from "./support/ToolSandbox.js"

const P = "/operator/console"

/** An operator account made through the operator plane, signed in, TOTP enrolled. */
const signedInOperator = (email: string) =>
  Effect.gen(function*() {
    const made = yield* operator("POST", "/operator-accounts", { email })
    expect(made.status, made.text).toBe(201)
    const ops = browser()
    yield* ops.get(`${P}/sign-in`)
    const signedIn = yield* ops.post(`${P}/sign-in`, { email, password: made.body.password })
    expect(signedIn.status, signedIn.text).toBe(303)
    const { secret } = yield* enrolled(ops, P)
    return { ops, accountId: made.body.id as string, secret }
  })

/** The audit entries of `action` in a tenant's sandbox: who. */
const auditedAs = (tenantId: string, action: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ actor_type: string; actor_id: string }>`
      SELECT actor_type, actor_id FROM audit_entries WHERE tenant_id = ${tenantId} AND action = ${action}
      ORDER BY occurred_at`.pipe(Effect.orDie))

describe("operator console over HTTP (issue 39)", () => {
  it.live(
    "an operator account with TOTP decides pilot applications; a member's session opens no operator page, nor the reverse",
    () =>
      Effect.gen(function*() {
        const made = yield* operator("POST", "/operator-accounts", { email: "Ops@Platform.test" })
        expect(made.status, made.text).toBe(201)
        const { id: accountId, password } = made.body as { id: string; password: string }
        expect(made.body.email).toBe("ops@platform.test")
        expect((yield* operator("POST", "/operator-accounts", { email: "ops@platform.test" })).status).toBe(409)

        // first sign-in: every page waits for the TOTP set-up
        const ops = browser()
        yield* ops.get(`${P}/sign-in`)
        const signedIn = yield* ops.post(`${P}/sign-in`, { email: "ops@platform.test", password })
        expect(signedIn.status, signedIn.text).toBe(303)
        expect(ops.cookie("operator_session")).toBeDefined()
        expect((yield* ops.get(`${P}/pilots`)).location).toBe(`${P}/mfa/enrol`)
        yield* enrolled(ops, P)

        const a = yield* operator("POST", "/pilot-applications", { organization_name: "Acme", contact_email: "a@acme.test" })
        const b = yield* operator("POST", "/pilot-applications", { organization_name: "Bolt <Co>", contact_email: "b@bolt.test" })
        let queue = yield* ops.get(`${P}/pilots`)
        expect(queue.status, queue.text).toBe(200)
        expect(queue.text).toMatch(/aria-current="page">submitted \(2\)/)
        expect(queue.text).toContain("Bolt &lt;Co&gt;")

        // a rejection needs a reason; the approval makes the tenant through the operator plane
        const noReason = yield* ops.post(`${P}/pilots/${b.body.id}/decision`, { decision: "reject", reason: " " })
        expect(noReason.status).toBe(400)
        const rejected = yield* ops.post(`${P}/pilots/${b.body.id}/decision`, { decision: "reject", reason: "Not a fit yet" })
        expect(rejected.status, rejected.text).toBe(303)
        const approved = yield* ops.post(`${P}/pilots/${a.body.id}/decision`, { decision: "approve" })
        expect(approved.status, approved.text).toBe(303)
        expect((yield* ops.post(`${P}/pilots/${a.body.id}/decision`, { decision: "reject", reason: "late" })).status).toBe(409)
        queue = yield* ops.get(`${P}/pilots?status=rejected`)
        expect(queue.text).toContain("<dt>Reason</dt><dd>Not a fit yet</dd>")
        expect(queue.text).toContain(`<dt>Decided by</dt><dd>${accountId}</dd>`)
        expect(queue.text).toMatch(/approved \(1\)/)
        const pilot = yield* operator("GET", `/pilot-applications/${a.body.id}`)
        expect(pilot.body.status).toBe("approved")
        const sql = yield* SqlClient.SqlClient
        const audits = yield* sql<{ actor_type: string; actor_id: string }>`
        SELECT actor_type, actor_id FROM audit_entries
        WHERE tenant_id = ${pilot.body.tenant_id} AND action = 'approvePilotApplication'`.pipe(Effect.orDie)
        expect(audits).toEqual([{ actor_type: "operator", actor_id: accountId }])

        // a member: a customer session opens no operator page, and a member cannot sign in there
        const member = browser()
        yield* signedUp(member, "ada@acme.test")
        const memberSession = member.cookie("console_session")!
        const forged = browser()
        yield* forged.get(`${P}/sign-in`)
        expect((yield* forged.post(`${P}/sign-in`, { email: "ada@acme.test", password: PASSWORD })).status).toBe(401)
        const { baseUrl } = yield* TestApp
        const withCookie = (url: string, cookie: string) =>
          Effect.promise(() => fetch(`${baseUrl}${url}`, { redirect: "manual", headers: { cookie } }))
        expect((yield* withCookie(`${P}/pilots`, `operator_session=${memberSession}`)).headers.get("location")).toBe(`${P}/sign-in`)
        // an operator: its session opens no customer page, and it cannot sign in there
        const opsSession = ops.cookie("operator_session")!
        expect((yield* withCookie("/console", `console_session=${opsSession}`)).headers.get("location")).toBe("/console/sign-in")
        yield* forged.get("/console/sign-in")
        expect((yield* forged.post("/console/sign-in", { email: "ops@platform.test", password })).status).toBe(401)
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )

  it.live(
    "connections pending review (each operation's effect, paths and schemas, the address class) and production requests: approve and reject",
    () =>
      Effect.gen(function*() {
        const { accountId, ops } = yield* signedInOperator("ops@platform.test")
        const sb = yield* provisionSandbox()
        const key = (yield* createKey(sb.tenantId, TOOL_SCOPES, "manager")).secret
        const register = (name: string) =>
          Effect.map(
            request("POST", `${sb.P}/connections`, { key, body: { ...connectionBody("https://127.0.0.1:9"), name } }),
            (r) => expectSingle(r, 201).id as string
          )
        const orders = yield* register("Orders")
        const refunds = yield* register("Refunds")
        let queue = yield* ops.get(`${P}/connections`)
        expect(queue.status, queue.text).toBe(200)
        expect(queue.text).toContain("2 pending review.")
        expect(queue.text).toContain("<code>POST https://127.0.0.1:9/refunds</code>")
        expect(queue.text).toContain(
          "<dt>Reconciliation path</dt><dd><code>GET https://127.0.0.1:9/refunds/operations/{operation_id}</code>"
        )
        expect(queue.text).toContain("<dt>Effect</dt><dd>write (changes the customer's data)</dd>")
        expect(queue.text).toContain("&quot;required&quot;: [\n    &quot;order_id&quot;")
        expect(queue.text).toContain("<li><code>127.0.0.1</code>: allowlisted</li>")
        expect((yield* ops.post(`${P}/connections/${refunds}/review`, { decision: "reject", note: "" })).status).toBe(400)
        const rejected = yield* ops.post(`${P}/connections/${refunds}/review`, { decision: "reject", note: "Refunds need a limit" })
        expect(rejected.status, `${refunds} ${rejected.text}`).toBe(303)
        expect((yield* ops.post(`${P}/connections/${orders}/review`, { decision: "approve" })).status).toBe(303)
        expect((yield* ops.post(`${P}/connections/${orders}/review`, { decision: "approve" })).status).toBe(409)
        queue = yield* ops.get(`${P}/connections`)
        expect(queue.text).toContain("0 pending review.")
        const approved = yield* request("GET", `${sb.P}/connections/${orders}`, { key })
        expect(expectSingle(approved).status).toBe("active")
        expect(expectSingle(approved).tool_ids).toHaveLength(2)
        expect(expectSingle(yield* request("GET", `${sb.P}/connections/${refunds}`, { key })).status).toBe("rejected")
        expect(yield* auditedAs(sb.tenantId, "reviewConnection")).toEqual([
          { actor_type: "operator", actor_id: accountId },
          { actor_type: "operator", actor_id: accountId }
        ])

        // production requests: the tenant's request, rejected without a reason (400), then approved
        const requester = (yield* createKey(sb.tenantId, ["environments:read", "environments:write"], "requester")).secret
        const body = { use_case: "Support <agent>", expected_monthly_runs: 5000, contact_email: "ops@acme.test" }
        const preq = expectSingle(yield* request("POST", `${sb.P}/production-request`, { key: requester, body }), 201).id as string
        const production = yield* ops.get(`${P}/production`)
        expect(production.status, production.text).toBe(200)
        expect(production.text).toContain("1 submitted requests.")
        expect(production.text).toContain("<dt>Use case</dt><dd>Support &lt;agent&gt;</dd>")
        expect((yield* ops.post(`${P}/production/${preq}/decision`, { decision: "reject", reason: "" })).status).toBe(400)
        const decided = yield* ops.post(`${P}/production/${preq}/decision`, { decision: "approve" })
        expect(decided.status, decided.text).toBe(303)
        expect((yield* operator("GET", `/production-requests/${preq}`)).body.status).toBe("approved")
        expect(yield* auditedAs(sb.tenantId, "approveProductionRequest")).toEqual([{ actor_type: "operator", actor_id: accountId }])
      }).pipe(Effect.provide(makeTestApp(toolSettings()))),
    60_000
  )

  it.live(
    "tenants and cells: a tenant's keys without secrets and none of another tenant's, quota edit and signing-key rotation audited as the account, the cluster, the metrics",
    () =>
      Effect.gen(function*() {
        const { accountId, ops } = yield* signedInOperator("ops@platform.test")
        const acme = yield* provisionSandbox(undefined, "Acme")
        const bolt = yield* provisionSandbox(undefined, "Bolt")
        const tenants = yield* ops.get(`${P}/tenants`)
        expect(tenants.status, tenants.text).toBe(200)
        expect(tenants.text).toContain(`href="${P}/tenants/${acme.tenantId}">Acme</a>`)
        expect(tenants.text).toContain("sandbox: ready")

        let page = yield* ops.get(`${P}/tenants/${acme.tenantId}`)
        expect(page.status, page.text).toBe(200)
        expect(page.text).toContain(`<code>${acme.key.slice(0, 16)}`)
        expect(page.text).not.toContain(acme.key)
        expect(page.text).not.toContain(bolt.key.slice(0, 16))
        expect(page.text).not.toContain(bolt.tenantId)
        expect(page.text).toContain("<code>runs_per_day</code>")

        // quota edit: through the operator plane's quota service, audited as the account
        const at = `${P}/tenants/${acme.tenantId}/environments/sandbox`
        expect((yield* ops.post(`${at}/quotas/runs_per_day`, { limit: "-1" })).status).toBe(400)
        expect((yield* ops.post(`${at}/quotas/no_such_quota`, { limit: "1" })).status).toBe(404)
        const set = yield* ops.post(`${at}/quotas/runs_per_day`, { limit: "7" })
        expect(set.status, set.text).toBe(303)
        const quotas = yield* operator("GET", `/tenants/${acme.tenantId}/environments/sandbox/quotas`)
        expect(quotas.body.items.find((q: { name: string }) => q.name === "runs_per_day").limit).toBe(7)
        expect((yield* operator("GET", `/tenants/${bolt.tenantId}/environments/sandbox/quotas`)).body.items[0].limit).not.toBe(7)
        expect(yield* auditedAs(acme.tenantId, "setQuota")).toEqual([{ actor_type: "operator", actor_id: accountId }])
        page = yield* ops.get(`${P}/tenants/${acme.tenantId}`)
        expect(page.text).toMatch(/name="limit" type="text" inputmode="numeric" required value="7"/)

        // signing-key rotation: confirmed, audited as the account
        expect((yield* ops.post(`${at}/signing-keys/rotate`, {})).status).toBe(400)
        const rotated = yield* ops.post(`${at}/signing-keys/rotate`, { confirm: "yes" })
        expect(rotated.status, rotated.text).toBe(200)
        expect(rotated.text).toContain("stays published until")
        expect(yield* auditedAs(acme.tenantId, "rotateSigningKey")).toEqual([{ actor_type: "operator", actor_id: accountId }])

        // another tenant's run under this tenant's path, and unknown pages: 404
        expect((yield* ops.get(`${P}/tenants/ten_none`)).status).toBe(404)
        expect((yield* ops.get(`${at}/runs/run_none`)).status).toBe(404)
        const cluster = yield* ops.get(`${P}/cluster`)
        expect(cluster.status, cluster.text).toBe(200)
        expect(cluster.text).toContain("<caption>Runners</caption>")

        // metrics at a glance: the active cells drawn (an SVG with its figures in words) and listed
        const listed = yield* request("GET", `/v1/tenants/${acme.tenantId}/environments/sandbox/workspaces`, { key: acme.key })
        expect(listed.status).toBeLessThan(500) // admitted by acme's cell (started by it), whatever the key's scopes
        const metrics = yield* ops.get(`${P}/metrics`)
        expect(metrics.status, metrics.text).toBe(200)
        expect(metrics.text).toMatch(
          new RegExp(`<svg role="img" aria-label="Active runs per cell \\(executing or parked\\): [^"]*${acme.tenantId}/sandbox 0 runs`)
        )
        expect(metrics.text).toContain("<caption>Cells</caption>")
        expect(metrics.text).toContain(`<code>${acme.tenantId}</code>`)
        expect(metrics.text).toContain("Webhook deliveries waiting to be sent: nothing yet.")
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )

  it.live(
    "personal API tokens: made after a fresh TOTP code and shown once; the operator API and /metrics take them, audited with the account's id (the shared token as operator); a revoked one is refused like a wrong one",
    () =>
      Effect.gen(function*() {
        const { accountId, ops, secret } = yield* signedInOperator("ops@platform.test")
        const sb = yield* provisionSandbox(undefined, "Acme")
        expect((yield* ops.get(`${P}/tokens`)).text).toContain("No tokens.")
        const wrong = yield* ops.post(`${P}/tokens`, { name: "cli", code: "000000" })
        expect(wrong.status).toBe(400)
        // the enrolment spent this step's code
        const made = yield* ops.post(`${P}/tokens`, { name: "cli", code: codeAt(secret, (yield* now) + 30_000) })
        expect(made.status, made.text).toBe(201)
        expect(made.headers.get("cache-control")).toBe("no-store")
        const token = /<code id="secret">([^<]+)<\/code>/.exec(made.text)![1]!
        expect(token).toMatch(/^opk_[A-Za-z0-9_-]{43}$/)
        const listed = yield* ops.get(`${P}/tokens`)
        expect(listed.text).toContain(`<code>${token.slice(0, 12)}...</code>`)
        expect(listed.text).not.toContain(token)

        // the operator API as the account: its audit entry names it; the shared token's names `operator`
        const quota = `/operator/v1/tenants/${sb.tenantId}/environments/sandbox/quotas/runs_per_day`
        const mine = yield* request("PUT", quota, { key: token, body: { limit: 7 } })
        expect(mine.status, mine.text).toBe(200)
        expect((yield* operator("PUT", `/tenants/${sb.tenantId}/environments/sandbox/quotas/runs_per_day`, { limit: 8 })).status)
          .toBe(200)
        expect(yield* auditedAs(sb.tenantId, "setQuota")).toEqual([
          { actor_type: "operator", actor_id: accountId },
          { actor_type: "operator", actor_id: "operator" }
        ])
        expect((yield* request("GET", "/metrics", { key: token })).status).toBe(200)

        // revoked: refused as a wrong token is, on the API and /metrics
        const id = /action="\/operator\/console\/tokens\/([^/]+)\/revoke"/.exec(listed.text)![1]!
        expect((yield* ops.post(`${P}/tokens/${id}/revoke`, {})).status).toBe(303)
        expect((yield* ops.post(`${P}/tokens/${id}/revoke`, {})).status).toBe(404)
        const refused = yield* request("PUT", quota, { key: token, body: { limit: 9 } })
        const wrongToken = yield* request("PUT", quota, { key: `opk_${"x".repeat(43)}`, body: { limit: 9 } })
        expect([refused.status, refused.body?.error?.code]).toEqual([401, "invalid_operator_token"])
        expect([wrongToken.status, wrongToken.body?.error?.code]).toEqual([401, "invalid_operator_token"])
        expect((yield* request("GET", "/metrics", { key: token })).status).toBe(401)
        expect((yield* ops.get(`${P}/tokens`)).text).toContain("revoked ")
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )
})
