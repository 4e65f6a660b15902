/**
 * The console's routes under `/console` (issue 38), beside the HttpApi on its router (as `/docs`
 * and `/metrics` are). The pipeline passes such paths straight to the router (no key, no
 * idempotency); what guards them is here:
 *   - the session: a random token in the `console_session` cookie (HttpOnly, SameSite=Lax, path
 *     /console, Secure when PUBLIC_BASE_URL is https), stored as its digest, replaced at sign-in;
 *   - CSRF: every POST carries `csrf`, an HMAC of the session's token (before sign-in, of the
 *     `console_pre` cookie's random value); a POST without the right one gets a 403 page;
 *   - the TOTP step at sign-in once enrolled: every page but the step itself waits for it.
 * Answers: text/html, `Cache-Control: no-store` (a key's secret is shown once and never kept),
 * a Content-Security-Policy without scripts, no referrer (links carry single-use tokens).
 */
import { HttpApiBuilder, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Console, type Member, type Refused } from "../Console.js"
import { escape, form, page, step } from "./Pages.js"
import { sameText, token as randomToken } from "./Secrets.js"

const SESSION_COOKIE = "console_session"
const PRE_COOKIE = "console_pre"

const HEADERS = {
  "content-type": "text/html; charset=utf-8",
  "cache-control": "no-store",
  "content-security-policy":
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff"
}

/** What a handler knows of its request. */
interface Visit {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly session: string | undefined
  readonly member: Option.Option<Member>
  /** the CSRF token of this visit's forms */
  readonly csrf: string
  /** cookies to set on the answer */
  readonly cookies: Array<[string, string, number]>
  readonly baseUrl: string
  readonly query: URLSearchParams
}

export const ConsoleRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const consoles = yield* Console
    const config = yield* AppConfig
    const secure = Option.exists(config.publicBaseUrl, (u) => u.startsWith("https:"))

    const visit = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const cookies: Array<[string, string, number]> = []
      const session = request.cookies[SESSION_COOKIE]
      const member = session === undefined ? Option.none<Member>() : yield* consoles.member(session)
      let pre = request.cookies[PRE_COOKIE]
      if (pre === undefined || pre.length < 20) {
        pre = randomToken()
        cookies.push([PRE_COOKIE, pre, 12 * 3600])
      }
      const signedIn = Option.isSome(member) && session !== undefined
      const baseUrl = Option.getOrElse(config.publicBaseUrl, () => `http://${request.headers["host"] ?? "localhost"}`).replace(/\/+$/, "")
      const url = new URL(request.url, "http://console")
      return {
        request,
        session: signedIn ? session : undefined,
        member,
        csrf: consoles.csrfOf(signedIn ? session! : pre),
        cookies,
        baseUrl,
        query: url.searchParams
      } satisfies Visit
    })

    const respond = (v: Visit, response: HttpServerResponse.HttpServerResponse) =>
      v.cookies.reduce(
        (r, [name, value, seconds]) =>
          HttpServerResponse.unsafeSetCookie(r, name, value, {
            httpOnly: true,
            sameSite: "lax",
            path: "/console",
            secure,
            maxAge: Duration.seconds(seconds)
          }),
        response
      )

    const html = (v: Visit, status: number, title: string, body: string, message?: string) =>
      respond(
        v,
        HttpServerResponse.text(
          page({
            title,
            message,
            member: Option.match(v.member, {
              onNone: () => undefined,
              onSome: (m) => ({ email: m.email, csrf: v.csrf })
            })
          }, body),
          { status, headers: HEADERS }
        )
      )

    const redirect = (v: Visit, location: string) =>
      respond(v, HttpServerResponse.empty({ status: 303, headers: { location, "cache-control": "no-store" } }))

    /** A POST's fields, once its CSRF token is the visit's (else the 403 page). */
    const posted = (v: Visit) =>
      Effect.gen(function*() {
        const params = yield* v.request.urlParamsBody.pipe(Effect.orElseSucceed(() => []))
        const fields: Record<string, string> = {}
        for (const [k, value] of params) fields[k] = value
        const ok = typeof fields["csrf"] === "string" && sameText(fields["csrf"], v.csrf)
        return ok ? Option.some(fields) : Option.none()
      })

    const forbidden = (v: Visit) =>
      html(v, 403, "Forbidden", `<p>This form has expired or did not come from this console. <a href="/console">Start again</a>.</p>`)

    type Answer<E = never> = Effect.Effect<HttpServerResponse.HttpServerResponse, E, HttpRouter.RouteContext>
    type Page = (v: Visit, message?: { status: number; text: string }) => Answer
    const get = (path: HttpRouter.PathInput, render: Page) => router.get(path, Effect.flatMap(visit, (v) => render(v)).pipe(Effect.orDie))

    /** A form's POST: CSRF first, then `act`; a refusal shows `again` (its form) with the message. */
    const post = (
      path: HttpRouter.PathInput,
      act: (v: Visit, fields: Record<string, string>) => Answer<Refused>,
      again: Page
    ) =>
      router.post(
        path,
        Effect.gen(function*() {
          const v = yield* visit
          const fields = yield* posted(v)
          if (Option.isNone(fields)) return forbidden(v)
          return yield* act(v, fields.value).pipe(
            Effect.catchTag("Refused", (r) => again(v, { status: r.status, text: r.message }))
          )
        }).pipe(Effect.orDie)
      )

    const orgParam = Effect.map(HttpRouter.params, (p) => p["org"] ?? "")

    /** The member of a page that needs one: else to sign-in, or to the TOTP step when it is due. */
    const withMember = <E, R>(
      v: Visit,
      then: (m: Member, session: string) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R> =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, "/console/sign-in")),
        onSome: (m) => m.mfaDue ? Effect.succeed(redirect(v, "/console/mfa")) : then(m, v.session!)
      })

    /** A refusal on a page that is not a form's (another organization's: 404). */
    const refusedPage = (v: Visit) => (r: Refused) => Effect.succeed(html(v, r.status, "Not available", `<p>${escape(r.message)}</p>`))

    // ---- sign-up, verification, sign-in, sign-out, reset ----

    const signUpPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Create your account",
        form("/console/sign-up", v.csrf, [
          { name: "email", label: "Email address", type: "email", autocomplete: "email" },
          { name: "password", label: "Password (at least 12 characters)", type: "password", autocomplete: "new-password" }
        ], "Create account") + `<p>Have an account? <a href="/console/sign-in">Sign in</a>.</p>`,
        m?.text
      ))
    yield* get("/console/sign-up", signUpPage)
    yield* post("/console/sign-up", (v, f) =>
      Effect.as(
        consoles.signUp({ email: f["email"] ?? "", password: f["password"] ?? "", baseUrl: v.baseUrl }),
        html(
          v,
          200,
          "Check your mail",
          `<p class="note">We sent a link to ${
            escape(f["email"] ?? "")
          }. Open it to verify your address, then <a href="/console/sign-in">sign in</a>.</p>`
        )
      ), signUpPage)

    const verifyPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Verify your email address",
        form(
          "/console/verify",
          v.csrf,
          [{ name: "token", label: "", type: "hidden", value: v.query.get("token") ?? "" }],
          "Verify my address"
        ),
        m?.text
      ))
    yield* get("/console/verify", verifyPage)
    yield* post("/console/verify", (v, f) =>
      Effect.as(
        consoles.verify(f["token"] ?? ""),
        html(v, 200, "Address verified", `<p class="note">Your address is verified. <a href="/console/sign-in">Sign in</a>.</p>`)
      ), (v, m) =>
      Effect.succeed(
        html(
          v,
          m?.status ?? 400,
          "Verify your email address",
          `<p><a href="/console/sign-in">Sign in</a> or <a href="/console/reset">ask for a new link</a>.</p>`,
          m?.text
        )
      ))

    const signInPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Sign in",
        form("/console/sign-in", v.csrf, [
          { name: "email", label: "Email address", type: "email", autocomplete: "username" },
          { name: "password", label: "Password", type: "password", autocomplete: "current-password" }
        ], "Sign in") +
          `<p>New here? <a href="/console/sign-up">Create an account</a>. <a href="/console/reset">Forgot your password?</a></p>`,
        m?.text
      ))
    yield* get("/console/sign-in", signInPage)
    yield* post("/console/sign-in", (v, f) =>
      Effect.map(
        consoles.signIn({
          email: f["email"] ?? "",
          password: f["password"] ?? "",
          address: Option.getOrElse(v.request.remoteAddress, () => "unknown"),
          previous: v.request.cookies[SESSION_COOKIE]
        }),
        (session) => {
          v.cookies.push([SESSION_COOKIE, session, 12 * 3600])
          return redirect(v, "/console")
        }
      ), signInPage)

    yield* router.post(
      "/console/sign-out",
      Effect.gen(function*() {
        const v = yield* visit
        if (Option.isNone(yield* posted(v))) {
          return forbidden(v)
        }
        if (v.session !== undefined) yield* consoles.signOut(v.session)
        v.cookies.push([SESSION_COOKIE, "", 0])
        return redirect(v, "/console/sign-in")
      }).pipe(Effect.orDie)
    )

    const resetPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Reset your password",
        form(
          "/console/reset",
          v.csrf,
          [{ name: "email", label: "Email address", type: "email", autocomplete: "email" }],
          "Send a reset link"
        ),
        m?.text
      ))
    yield* get("/console/reset", resetPage)
    yield* post("/console/reset", (v, f) =>
      Effect.as(
        consoles.requestReset({ email: f["email"] ?? "", baseUrl: v.baseUrl }),
        html(v, 200, "Check your mail", `<p class="note">If ${escape(f["email"] ?? "")} has an account, a reset link is on its way.</p>`)
      ), resetPage)

    const resetConfirmPage: Page = (v, m) =>
      Effect.succeed(html(
        v,
        m?.status ?? 200,
        "Choose a new password",
        form("/console/reset/confirm", v.csrf, [
          { name: "token", label: "", type: "hidden", value: v.query.get("token") ?? "" },
          { name: "password", label: "New password (at least 12 characters)", type: "password", autocomplete: "new-password" }
        ], "Set password"),
        m?.text
      ))
    yield* get("/console/reset/confirm", resetConfirmPage)
    yield* post("/console/reset/confirm", (v, f) =>
      Effect.as(
        consoles.reset({ link: f["token"] ?? "", password: f["password"] ?? "" }),
        html(v, 200, "Password changed", `<p class="note">Your password is changed. <a href="/console/sign-in">Sign in</a>.</p>`)
      ), (v, m) =>
      Effect.succeed(
        html(v, m?.status ?? 400, "Choose a new password", `<p><a href="/console/reset">Ask for a new link</a>.</p>`, m?.text)
      ))

    // ---- two-factor authentication ----

    const mfaPage: Page = (v, m) =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, "/console/sign-in")),
        onSome: () =>
          Effect.succeed(html(
            v,
            m?.status ?? 200,
            "Two-factor authentication",
            form("/console/mfa", v.csrf, [
              { name: "code", label: "Code from your authenticator app (or a recovery code)", type: "text", autocomplete: "one-time-code" }
            ], "Continue"),
            m?.text
          ))
      })
    yield* get("/console/mfa", mfaPage)
    yield* post("/console/mfa", (v, f) =>
      Option.match(v.member, {
        onNone: () => Effect.succeed(redirect(v, "/console/sign-in")),
        onSome: (m) => Effect.as(consoles.checkMfa(m, v.session!, f["code"] ?? ""), redirect(v, "/console"))
      }), mfaPage)

    const enrolPage: Page = (v, msg) =>
      withMember(v, (m) =>
        Effect.map(consoles.beginEnrolment(m), (e) =>
          html(
            v,
            msg?.status ?? 200,
            "Set up two-factor authentication",
            `<section><p>Scan this QR code with an authenticator app (any RFC 6238 TOTP app), or enter the key by hand.</p>
<img class="qr" src="${e.qr}" alt="QR code of your two-factor key">
<p>Key: <code>${escape(e.secret.replace(/(.{4})/g, "$1 ").trim())}</code></p></section>` +
              form("/console/mfa/enrol", v.csrf, [
                { name: "code", label: "Six-digit code from the app", type: "text", autocomplete: "one-time-code", inputmode: "numeric" }
              ], "Turn on two-factor authentication"),
            msg?.text
          ))).pipe(Effect.catchTag("Refused", () => Effect.succeed(redirect(v, "/console"))))
    yield* get("/console/mfa/enrol", enrolPage)
    yield* post("/console/mfa/enrol", (v, f) =>
      withMember(v, (m, session) =>
        Effect.map(consoles.confirmEnrolment(m, session, f["code"] ?? ""), (codes) =>
          html(
            v,
            200,
            "Save your recovery codes",
            `<p class="note">Two-factor authentication is on. Each code below signs you in once if you lose your
authenticator. They are shown only now: keep them somewhere safe.</p><pre aria-label="Recovery codes">${codes.join("\n")}</pre>
<p><a href="/console">Continue</a></p>`
          ))), enrolPage)

    // ---- organization, application, key, quickstart ----

    const homePage: Page = (v, msg) =>
      withMember(v, (m) =>
        m.organizationId !== null
          ? Effect.succeed(redirect(v, `/console/orgs/${m.organizationId}`))
          : Effect.succeed(html(
            v,
            msg?.status ?? 200,
            "Welcome",
            `<ol class="steps">${step(true, "Verify your email address")}${
              step(
                m.enrolled,
                m.enrolled ? "Two-factor authentication" : `<a href="/console/mfa/enrol">Set up two-factor authentication</a>`
              )
            }${step(false, "Create your organization")}</ol>` +
              form("/console/organizations", v.csrf, [{
                name: "name",
                label: "Organization name",
                type: "text",
                autocomplete: "organization"
              }], "Create organization"),
            msg?.text
          )))
    yield* get("/console", homePage)
    yield* post("/console/organizations", (v, f) =>
      withMember(v, (m) =>
        Effect.map(consoles.createOrganization(m, f["name"] ?? ""), (id) =>
          redirect(v, `/console/orgs/${id}`))), homePage)

    const orgPage: Page = (v, msg) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m) =>
          Effect.map(consoles.status(m, org), (s) => {
            const ready = s.sandbox === "ready"
            const application = s.pilot === undefined
              ? form(`/console/orgs/${org}/application`, v.csrf, [], "Apply for a pilot")
              : `<dl><dt>Pilot application</dt><dd>${escape(s.pilot.id)}: ${escape(s.pilot.status)}</dd>${
                s.sandbox === undefined ? "" : `<dt>Sandbox</dt><dd>${ready ? "Ready" : escape(s.sandbox)}</dd>`
              }</dl>${s.pilot.status === "submitted" ? "<p>An operator reviews your application; this page shows the decision.</p>" : ""}`
            return html(
              v,
              msg?.status ?? 200,
              s.organization.name,
              `<ol class="steps">${step(true, "Verify your email address")}${
                step(
                  m.enrolled,
                  m.enrolled ? "Two-factor authentication" : `<a href="/console/mfa/enrol">Set up two-factor authentication</a>`
                )
              }${step(true, "Create your organization")}${step(s.pilot !== undefined, "Apply for a pilot")}${step(ready, "Sandbox ready")}${
                step(s.completed, ready ? `<a href="/console/orgs/${org}/quickstart">Run the quickstart</a>` : "Run the quickstart")
              }</ol>` +
                `<p class="${s.completed ? "done" : "todo"}" id="onboarding">${
                  s.completed
                    ? "Onboarding complete: your sandbox ran its first agent run."
                    : "Onboarding is complete once a run in your sandbox succeeds."
                }</p>` +
                `<section><h2>Pilot</h2>${application}</section>` +
                (ready && m.enrolled
                  ? `<section><h2>Keys</h2><p><a href="/console/orgs/${org}/keys/new">Create a key</a></p></section>`
                  : "") +
                (m.enrolled
                  ? `<section><h2>Members</h2>${
                    form(`/console/orgs/${org}/invitations`, v.csrf, [
                      { name: "email", label: "Invite by email address", type: "email", autocomplete: "off" }
                    ], "Send invitation")
                  }</section>`
                  : ""),
              msg?.text
            )
          }).pipe(Effect.catchTag("Refused", refusedPage(v)))))
    yield* get("/console/orgs/:org", orgPage)
    yield* post("/console/orgs/:org/application", (v) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m) =>
          Effect.as(consoles.apply(m, org), redirect(v, `/console/orgs/${org}`)))), orgPage)

    yield* post("/console/orgs/:org/invitations", (v, f) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m) =>
          Effect.as(
            consoles.invite(m, org, { email: f["email"] ?? "", baseUrl: v.baseUrl }),
            html(
              v,
              200,
              "Invitation sent",
              `<p class="note">We mailed ${escape(f["email"] ?? "")} a link to join.</p>
<p><a href="/console/orgs/${org}">Back to your organization</a></p>`
            )
          ))), orgPage)

    // an invitation: shown to anyone with the link, accepted by the invited address signed in
    const invitePage: Page = (v, msg) =>
      consoles.invitation(v.query.get("token") ?? "").pipe(
        Effect.map((i) =>
          html(
            v,
            msg?.status ?? 200,
            `Join ${i.organization}`,
            `<p>This invitation is for ${escape(i.email)}.</p>` +
              (Option.isSome(v.member) && !v.member.value.mfaDue
                ? form(`/console/invite?token=${encodeURIComponent(v.query.get("token") ?? "")}`, v.csrf, [], "Join")
                : `<p><a href="/console/sign-up">Create an account</a> or <a href="/console/sign-in">sign in</a> with that
address, then open the link in the mail again.</p>`),
            msg?.text
          )
        ),
        Effect.catchTag("Refused", refusedPage(v))
      )
    yield* get("/console/invite", invitePage)
    yield* post("/console/invite", (v) =>
      withMember(v, (m) =>
        Effect.map(consoles.accept(m, v.query.get("token") ?? ""), (org) =>
          redirect(v, `/console/orgs/${org}`))), invitePage)

    const newKeyPage: Page = (v, msg) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m) =>
          !m.enrolled
            ? Effect.succeed(redirect(v, "/console/mfa/enrol"))
            : Effect.map(consoles.status(m, org), () =>
              html(
                v,
                msg?.status ?? 200,
                "Create a key",
                `<p>A key lets your server call the API. It is shown once; keep it in your server's secret manager.</p>` +
                  form(`/console/orgs/${org}/keys`, v.csrf, [
                    { name: "name", label: "Key name", type: "text", value: "Server key" },
                    { name: "code", label: "Current two-factor code", type: "text", autocomplete: "one-time-code", inputmode: "numeric" }
                  ], "Create key"),
                msg?.text
              )).pipe(Effect.catchTag("Refused", refusedPage(v)))))
    yield* get("/console/orgs/:org/keys/new", newKeyPage)
    yield* post("/console/orgs/:org/keys", (v, f) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m, session) =>
          Effect.gen(function*() {
            if (!m.enrolled) {
              return redirect(v, "/console/mfa/enrol")
            }
            yield* consoles.checkMfa(m, session, f["code"] ?? "")
            const fresh = yield* consoles.member(session)
            const key = yield* consoles.createKey(Option.getOrThrow(fresh), org, f["name"] ?? "")
            return html(
              v,
              201,
              "Your key",
              `<p class="note">Copy this secret now: it is shown only once, and we keep only its hash. Store it in your
server-side secret manager (an environment variable of your server, a vault), never in a browser, a mobile app,
a repository or a script bundle. If it leaks, revoke it (<code>DELETE .../api-keys/${escape(key.id)}</code>) and create another.</p>
<p class="secret" aria-label="Key secret"><code id="secret">${escape(key.secret)}</code></p>
<dl><dt>Key id</dt><dd>${escape(key.id)}</dd><dt>Scopes</dt><dd>${escape(key.scopes.join(", "))}</dd></dl>
<p><a href="/console/orgs/${org}/quickstart">Run the quickstart with it</a></p>`
            )
          }))), newKeyPage)

    yield* get("/console/orgs/:org/quickstart", (v) =>
      Effect.flatMap(orgParam, (org) =>
        withMember(v, (m) =>
          Effect.map(consoles.quickstart(m, org), (q) => {
            const P = `/v1/tenants/${q.tenantId}/environments/sandbox`
            const base = v.baseUrl
            const curl = `# your key, from your server's secret manager (never from a browser)
export AGENT_PLATFORM_KEY=sk_test_...
curl -sS -X POST ${base}${P}/conversations \\
  -H "Authorization: Bearer $AGENT_PLATFORM_KEY" -H "Idempotency-Key: $(uuidgen)" \\
  -H "Content-Type: application/json" \\
  -d '{"workspace_id": "${q.workspace_id}", "agent_revision_id": "${q.agent_revision_id}"}'
# then, with the conversation's id (conv_...): a run, answered when it ends
curl -sS -X POST ${base}${P}/conversations/conv_.../runs \\
  -H "Authorization: Bearer $AGENT_PLATFORM_KEY" -H "Idempotency-Key: $(uuidgen)" \\
  -H "Content-Type: application/json" -H "Prefer: wait=10" \\
  -d '{"input": [{"type": "text", "text": "Hello, platform!"}]}'`
            const ts = `import { FetchHttpClient } from "@effect/platform"
import { Effect } from "effect"
import * as AgentPlatform from "agent-platform/client"

const program = Effect.gen(function*() {
  const client = yield* AgentPlatform.make({
    baseUrl: "${base}",
    apiKey: process.env.AGENT_PLATFORM_KEY!, // from your server's secret manager
    tenantId: "${q.tenantId}",
    environment: "sandbox"
  })
  const conversation = yield* client.conversations.createConversation({
    payload: { workspace_id: "${q.workspace_id}", agent_revision_id: "${q.agent_revision_id}" }
  })
  const run = yield* client.runs.createRun({
    path: { conversation_id: conversation.id },
    payload: { input: [{ type: "text", text: "Hello, platform!" }] }
  })
  console.log(run) // then client.runs.getRun({ path: { run_id: ... } }) until it ends
})
Effect.runPromise(program.pipe(Effect.provide(FetchHttpClient.layer)))`
            return html(
              v,
              200,
              "Quickstart",
              `<dl><dt>Tenant</dt><dd>${escape(q.tenantId)}</dd><dt>Service actor</dt><dd>${escape(q.service_actor_id)}</dd>
<dt>Workspace</dt><dd>${escape(q.workspace_id)}</dd><dt>Agent revision</dt><dd>${escape(q.agent_revision_id)}</dd></dl>
<p>These are ids, not credentials. Your key goes in your server's environment, never in this page's snippets.</p>
<h2>curl</h2><pre>${escape(curl)}</pre><h2>TypeScript (the typed client)</h2><pre>${escape(ts)}</pre>
<p><a href="/console/orgs/${org}">Back to your organization</a>: it shows onboarding complete once a run succeeded.</p>`
            )
          }).pipe(Effect.catchTag("Refused", refusedPage(v))))))
  })
)
