/**
 * The console (issue 38) over plain HTTP (fetch with a cookie jar, no browser), against the real
 * service: the whole first-run path up to a succeeded run, and its negative paths: expired and
 * reused links, a POST without its CSRF token, a wrong TOTP code, another organization's pages,
 * sign-in attempts limited per account and per address. Mail goes to DATA_DIR/outbox (no SMTP_URL).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { makeTestApp, TestApp } from "./support/App.js"
import { operator } from "./support/Client.js"
import { type Browser, browser, codeAt, enrolled, mailTo, now, PASSWORD, quickstartRun, signedUp } from "./support/Console.js"

const orgOf = (b: Browser, name: string) =>
  Effect.gen(function*() {
    yield* b.get("/console")
    const created = yield* b.post("/console/organizations", { name })
    expect(created.status, created.text).toBe(303)
    return created.location!.split("/").at(-1)!
  })

describe("console over HTTP (issue 38)", () => {
  it.live(
    "sign-up to a succeeded quickstart run: MFA before the key, the secret shown once, no-store, onboarding complete",
    () =>
      Effect.gen(function*() {
        const b = browser()
        yield* signedUp(b, "ada@acme.test")
        const cookie = (yield* b.get("/console")).headers
        expect(cookie.get("cache-control")).toBe("no-store")
        expect(cookie.get("content-security-policy")).toContain("default-src 'none'")
        const { codes, secret } = yield* enrolled(b)
        const org = yield* orgOf(b, "Acme Robotics")
        // no key before the sandbox is ready
        expect((yield* b.post(`/console/orgs/${org}/application`)).status).toBe(303)
        let page = yield* b.get(`/console/orgs/${org}`)
        expect(page.text).toMatch(/pilot_\w+: submitted/)
        const pilotId = /(pilot_\w+): submitted/.exec(page.text)![1]!
        yield* b.get(`/console/orgs/${org}/keys/new`)
        // the next step's code (the enrolment spent this one)
        const early = yield* b.post(`/console/orgs/${org}/keys`, { name: "k", code: codeAt(secret, (yield* now) + 30_000) })
        expect(early.status).toBe(409)
        // the operator approves through the operator API; the page shows the sandbox Ready
        const approved = yield* operator("POST", `/pilot-applications/${pilotId}/approve`)
        expect(approved.status, approved.text).toBe(200)
        page = yield* b.get(`/console/orgs/${org}`)
        expect(page.text).toContain("<dt>Sandbox</dt><dd>Ready</dd>")
        expect(page.text).toContain("Onboarding is complete once a run in your sandbox succeeds.")
        // a key needs a current code: a wrong one is refused, a recovery code is not a TOTP here either once spent
        yield* b.get(`/console/orgs/${org}/keys/new`)
        expect((yield* b.post(`/console/orgs/${org}/keys`, { name: "k", code: "000000" })).status).toBe(400)
        const made = yield* b.post(`/console/orgs/${org}/keys`, { name: "Server key", code: codes[0]! })
        expect(made.status, made.text).toBe(201)
        expect(made.headers.get("cache-control")).toBe("no-store")
        const keySecret = /<code id="secret">(sk_test_[\w-]+)<\/code>/.exec(made.text)![1]!
        // spent: the same recovery code again is refused
        yield* b.get(`/console/orgs/${org}/keys/new`)
        expect((yield* b.post(`/console/orgs/${org}/keys`, { name: "again", code: codes[0]! })).status).toBe(400)
        const tenantId: string = approved.body.tenant_id
        // the audit log names the member
        const sql = yield* SqlClient.SqlClient
        const audits = yield* sql<{ actor_type: string; action: string }>`
        SELECT actor_type, action FROM audit_entries WHERE tenant_id = ${tenantId} AND action = 'consoleCreateApiKey'`.pipe(Effect.orDie)
        expect(audits).toEqual([{ actor_type: "member", action: "consoleCreateApiKey" }])
        // the quickstart page's ids, then a run with the key, as its snippets do
        const quick = yield* b.get(`/console/orgs/${org}/quickstart`)
        expect(quick.status, quick.text).toBe(200)
        const ws = /<dt>Workspace<\/dt><dd>(ws_\w+)<\/dd>/.exec(quick.text)![1]!
        const rev = /<dt>Agent revision<\/dt><dd>(\w+)<\/dd>/.exec(quick.text)![1]!
        expect(quick.text).not.toContain(keySecret)
        const app = yield* TestApp
        const { conversation, run } = yield* Effect.promise(() => quickstartRun(app.baseUrl, tenantId, keySecret, ws, rev))
        expect(JSON.stringify(conversation)).toMatch(/"id":"conv_/)
        expect(run.data?.status, JSON.stringify(run)).toBe("succeeded")
        page = yield* b.get(`/console/orgs/${org}`)
        expect(page.text).toContain("Onboarding complete")
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )

  it.effect("links are single-use and expire (TestClock); an unverified address cannot sign in", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const b = browser()
        yield* b.get("/console/sign-up")
        yield* b.post("/console/sign-up", { email: "late@acme.test", password: PASSWORD })
        yield* b.get("/console/sign-in")
        const unverified = yield* b.post("/console/sign-in", { email: "late@acme.test", password: PASSWORD })
        expect(unverified.status).toBe(403)
        const token = new URL((yield* mailTo("late@acme.test")).link, "http://x").searchParams.get("token")!
        yield* TestClock.adjust("25 hours")
        const expired = yield* b.post("/console/verify", { token })
        expect(expired.status).toBe(410)
        expect(expired.text).toContain("expired")
        // a reset link verifies the address; used once, then refused
        yield* b.get("/console/reset")
        yield* b.post("/console/reset", { email: "late@acme.test" })
        const reset = new URL((yield* mailTo("late@acme.test")).link, "http://x").searchParams.get("token")!
        expect((yield* b.post("/console/reset/confirm", { token: reset, password: "another long password" })).status).toBe(200)
        const reused = yield* b.post("/console/reset/confirm", { token: reset, password: "a third long password" })
        expect(reused.status).toBe(410)
        expect(reused.text).toContain("used already")
        // a forged link (its signature changed) is no link
        const forged = yield* b.post("/console/reset/confirm", { token: reset.slice(0, -2) + "xx", password: "a third long password" })
        expect(forged.status).toBe(400)
        expect((yield* b.post("/console/sign-in", { email: "late@acme.test", password: "another long password" })).status).toBe(303)
        // (the sweeps every hour, not every minute: moving TestClock by 25 h runs each due pass,
        // 1,500 of each sweep's statements at the default, 17 of the test's 20 s)
      }).pipe(Effect.provide(makeTestApp({ sweepIntervalSeconds: 3600 })))
    }), 60_000)

  it.live("CSRF, the TOTP step at sign-in, another organization's pages, and the sign-in limits", () =>
    Effect.gen(function*() {
      // a POST without its token (or with another session's) is refused with a 403 page
      const stranger = browser()
      yield* stranger.get("/console/sign-in")
      const noToken = yield* stranger.postWithoutCsrf("/console/sign-in", { email: "x@acme.test", password: PASSWORD })
      expect(noToken.status).toBe(403)
      expect(noToken.text).toContain("Forbidden")

      const ada = browser()
      yield* signedUp(ada, "ada2@acme.test")
      const { codes: adaCodes, secret } = yield* enrolled(ada)
      const adaOrg = yield* orgOf(ada, "Ada's")
      // a CSRF token of the pre-session is not the session's
      const cross = yield* stranger.post(`/console/orgs/${adaOrg}/application`)
      expect(cross.status).toBe(303)
      expect(cross.location).toBe("/console/sign-in")

      // sign out, sign in again: the session cookie changes and the TOTP step is due first
      const before = ada.cookie("console_session")
      yield* ada.post("/console/sign-out")
      yield* ada.get("/console/sign-in")
      const again = yield* ada.post("/console/sign-in", { email: "ada2@acme.test", password: PASSWORD })
      expect(again.status).toBe(303)
      expect(ada.cookie("console_session")).not.toBe(before)
      const due = yield* ada.get(`/console/orgs/${adaOrg}`)
      expect(due.location).toBe("/console/mfa")
      yield* ada.get("/console/mfa")
      expect((yield* ada.post("/console/mfa", { code: "123456" })).status).toBe(400)
      const code = codeAt(secret, (yield* now) + 30_000) // the enrolment spent this step's
      const passed = yield* ada.post("/console/mfa", { code })
      expect(passed.location).toBe("/console")
      // a code works once: signed in again, the same code is refused
      yield* ada.post("/console/sign-out")
      yield* ada.get("/console/sign-in")
      yield* ada.post("/console/sign-in", { email: "ada2@acme.test", password: PASSWORD })
      yield* ada.get("/console/mfa")
      expect((yield* ada.post("/console/mfa", { code })).status).toBe(400)
      expect((yield* ada.post("/console/mfa", { code: adaCodes[0]! })).location).toBe("/console")
      expect((yield* ada.get(`/console/orgs/${adaOrg}`)).status).toBe(200)

      // another organization's pages: 404, and nothing done there
      const bob = browser()
      yield* signedUp(bob, "bob@other.test")
      yield* orgOf(bob, "Bob's")
      expect((yield* bob.get(`/console/orgs/${adaOrg}`)).status).toBe(404)
      expect((yield* bob.get(`/console/orgs/${adaOrg}/quickstart`)).status).toBe(404)
      yield* bob.get("/console")
      expect((yield* bob.post(`/console/orgs/${adaOrg}/application`)).status).toBe(404)
      expect((yield* ada.get(`/console/orgs/${adaOrg}`)).text).toContain("Apply for a pilot")

      // an invitation: only the invited address joins, once
      yield* ada.get(`/console/orgs/${adaOrg}`)
      const sent = yield* ada.post(`/console/orgs/${adaOrg}/invitations`, { email: "carol@acme.test" })
      expect(sent.status, sent.text).toBe(200)
      const invite = (yield* mailTo("carol@acme.test")).link
      const shown = yield* bob.get(invite)
      expect(shown.text).toContain("This invitation is for carol@acme.test")
      expect((yield* bob.post(invite)).status).toBe(403)
      const carol = browser()
      yield* signedUp(carol, "carol@acme.test")
      yield* carol.get(invite)
      const joined = yield* carol.post(invite)
      expect(joined.location).toBe(`/console/orgs/${adaOrg}`)
      expect((yield* carol.get(`/console/orgs/${adaOrg}`)).status).toBe(200)
      expect((yield* carol.get(invite)).status).toBe(410)

      // per account: 5 failures, then even the right password waits
      const guesser = browser()
      yield* guesser.get("/console/sign-in")
      for (let i = 0; i < 5; i++) {
        expect((yield* guesser.post("/console/sign-in", { email: "bob@other.test", password: `wrong password ${i}` })).status).toBe(401)
      }
      expect((yield* guesser.post("/console/sign-in", { email: "bob@other.test", password: PASSWORD })).status).toBe(429)
      // per address: 20 failures over any accounts
      for (let i = 0; i < 15; i++) {
        yield* guesser.post("/console/sign-in", { email: `nobody${i}@other.test`, password: "wrong password" })
      }
      expect((yield* guesser.post("/console/sign-in", { email: "ada2@acme.test", password: PASSWORD })).status).toBe(429)
    }).pipe(Effect.provide(makeTestApp())), 60_000)
})
