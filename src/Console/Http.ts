/**
 * The customer console's routes under `/console` (issue 38): sign-up, verification and reset (its
 * sign-in, sessions, CSRF and TOTP pages are src/Console/Site.ts's, shared with the operator
 * console), the organization, its pilot application, invitations, the first key and the quickstart.
 */
import { HttpApiBuilder, HttpRouter } from "@effect/platform"
import { Effect, Option } from "effect"

import { escape, form, step } from "./Pages.js"
import { makeSite, type Page } from "./Site.js"

export const ConsoleRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const { consoles, get, html, post, redirect, refusedPage, withMember } = yield* makeSite(router, {
      prefix: "/console",
      kind: "member",
      sessionCookie: "console_session",
      preCookie: "console_pre",
      brand: "console",
      signInNote: `<p>New here? <a href="/console/sign-up">Create an account</a>. <a href="/console/reset">Forgot your password?</a></p>`
    })
    const orgParam = Effect.map(HttpRouter.params, (p) => p["org"] ?? "")

    // ---- sign-up, verification, reset ----

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
    yield* post(
      "/console/organizations",
      (v, f) =>
        withMember(v, (m) => Effect.map(consoles.createOrganization(m, f["name"] ?? ""), (id) => redirect(v, `/console/orgs/${id}`))),
      homePage
    )

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
    yield* post(
      "/console/orgs/:org/application",
      (v) =>
        Effect.flatMap(orgParam, (org) => withMember(v, (m) => Effect.as(consoles.apply(m, org), redirect(v, `/console/orgs/${org}`)))),
      orgPage
    )

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
    yield* post(
      "/console/invite",
      (v) => withMember(v, (m) => Effect.map(consoles.accept(m, v.query.get("token") ?? ""), (org) => redirect(v, `/console/orgs/${org}`))),
      invitePage
    )

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
