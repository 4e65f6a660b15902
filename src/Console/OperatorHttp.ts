/**
 * The operator console's routes under `/operator/console` (issue 39): the same site as the
 * customer console (src/Console/Site.ts: sessions, CSRF, TOTP) with its own cookies and accounts
 * of kind `operator`, made by `npm run operator -- create-operator`. An operator sets up TOTP at
 * the first sign-in: no other page opens before. Decisions go through the operator plane's own
 * services and name the operator account (src/Console.ts).
 */
import { HttpApiBuilder, HttpRouter, type HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Console, type Member } from "../Console.js"
import { conflict, invalid } from "../Kernel/Errors.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { csrfField, escape } from "./Pages.js"
import { makeSite, type Page, type Visit } from "./Site.js"

const P = "/operator/console"
const STATUSES = ["submitted", "approved", "rejected"] as const
type Status = typeof STATUSES[number]

export const OperatorConsoleRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const { consoles, get, html, post, redirect, refusedPage, withMember } = yield* makeSite(router, {
      prefix: P,
      kind: "operator",
      sessionCookie: "operator_session",
      preCookie: "operator_pre",
      brand: "operator console",
      signInNote: `<p>Operator accounts are made with <code>npm run operator -- create-operator --email ...</code>.</p>`
    })

    /** An operator's page: signed in, the TOTP step done, and TOTP enrolled (else its set-up first). */
    const withOperator = <E, R>(
      v: Visit,
      then: (m: Member) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ) => withMember(v, (m) => m.enrolled ? then(m) : Effect.succeed(redirect(v, `${P}/mfa/enrol`)))

    const nav =
      `<nav aria-label="Queues"><a href="${P}/pilots">Pilot applications</a> · <a href="${P}/connections">Connections to review</a></nav>`

    yield* get(P, (v) => withOperator(v, () => Effect.succeed(redirect(v, `${P}/pilots`))))

    // ---- pilot applications ----

    const pilotsPage: Page = (v, msg) =>
      withOperator(v, (m) => {
        const asked = v.query.get("status") ?? "submitted"
        const status: Status | null = (STATUSES as ReadonlyArray<string>).includes(asked) ? asked as Status : null
        return Effect.map(consoles.pilotQueue(m, status), ({ counts, rows }) => {
          const count = (s: string) => counts.find((c) => c.status === s)?.n ?? 0
          const filters = [...STATUSES, "all" as const].map((s) => {
            const n = s === "all" ? counts.reduce((a, c) => a + c.n, 0) : count(s)
            const current = (status ?? "all") === s
            return `<li><a href="${P}/pilots?status=${s}"${current ? ` aria-current="page"` : ""}>${s} (${n})</a></li>`
          }).join("")
          const items = rows.map((r) => {
            const decide = r.status !== "submitted" ? "" : `
<form method="post" action="${P}/pilots/${escape(r.id)}/decision">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="approve"><button type="submit">Approve ${escape(r.organization_name)}</button></form>
<form method="post" action="${P}/pilots/${escape(r.id)}/decision">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="reject">
<label for="reason-${escape(r.id)}">Reason of a rejection</label><input id="reason-${escape(r.id)}" name="reason" type="text" required>
<button type="submit">Reject ${escape(r.organization_name)}</button></form>`
            return `<section aria-label="${escape(r.organization_name)}"><h2>${escape(r.organization_name)}</h2>
<dl><dt>Application</dt><dd>${escape(r.id)}</dd><dt>Contact</dt><dd>${escape(r.contact_email)}</dd>
<dt>Submitted</dt><dd>${r.created_at.toISOString()}</dd><dt>Status</dt><dd>${escape(r.status)}</dd>${
              r.tenant_id === null ? "" : `<dt>Tenant</dt><dd>${escape(r.tenant_id)}</dd>`
            }${r.decision_reason === null ? "" : `<dt>Reason</dt><dd>${escape(r.decision_reason)}</dd>`}${
              r.decided_by === null ? "" : `<dt>Decided by</dt><dd>${escape(r.decided_by)}</dd>`
            }</dl>${decide}</section>`
          }).join("")
          return html(
            v,
            msg?.status ?? 200,
            "Pilot applications",
            `${nav}<ul class="filters">${filters}</ul>${items === "" ? `<p>No ${status ?? ""} applications.</p>` : items}`,
            msg?.text
          )
        }).pipe(Effect.catchTag("Refused", refusedPage(v)))
      })
    yield* get(`${P}/pilots`, pilotsPage)
    yield* post(`${P}/pilots/:id/decision`, (v, f) =>
      withOperator(v, (m) =>
        Effect.flatMap(HttpRouter.params, (p) =>
          Effect.as(
            consoles.decidePilot(m, p["id"] ?? "", f["decision"] === "approve" ? "approve" : "reject", f["reason"] ?? ""),
            redirect(v, `${P}/pilots?status=${f["decision"] === "approve" ? "approved" : "rejected"}`)
          ))), pilotsPage)

    // ---- connections pending review ----

    const json = (value: unknown) => `<pre>${escape(JSON.stringify(value, null, 2))}</pre>`
    const connectionsPage: Page = (v, msg) =>
      withOperator(v, (m) =>
        Effect.map(consoles.connectionQueue(m), (rows) => {
          const items = rows.map((c) => {
            const id = escape(c.id)
            const operations = c.operations.map((op) =>
              `<section aria-label="Operation ${escape(op.name)}"><h3>${escape(op.name)}: ${op.effect === "write" ? "WRITE" : "read"}</h3>
<dl><dt>Effect</dt><dd>${op.effect === "write" ? "write (changes the customer's data)" : "read"}</dd>
<dt>Path</dt><dd><code>POST ${escape(c.base_url.replace(/\/+$/, ""))}${escape(op.path)}</code></dd>${
                op.reconciliation_path === undefined
                  ? ""
                  : `<dt>Reconciliation path</dt><dd><code>GET ${escape(c.base_url.replace(/\/+$/, ""))}${
                    escape(op.reconciliation_path)
                  }</code></dd>`
              }${op.description === undefined ? "" : `<dt>Description</dt><dd>${escape(op.description)}</dd>`}</dl>
<h4>Input schema</h4>${json(op.input_schema)}<h4>Output schema</h4>${json(op.output_schema)}</section>`
            ).join("")
            const addresses = c.addresses.map((a) => `<li><code>${escape(a.address)}</code>: ${escape(a.class)}</li>`).join("")
            return `<section aria-label="${escape(c.name)}"><h2>${escape(c.name)}</h2>
<dl><dt>Connection</dt><dd>${id}</dd><dt>Tenant</dt><dd>${escape(c.tenant_id)} (${escape(c.environment)})</dd>
<dt>Destination</dt><dd><code>${escape(c.base_url)}</code></dd><dt>Resolves to</dt><dd><ul>${addresses}</ul></dd>
<dt>Registered</dt><dd>${escape(c.created_at)}</dd></dl>${operations}
<form method="post" action="${P}/connections/${id}/review">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="approve"><button type="submit">Approve ${escape(c.name)}</button></form>
<form method="post" action="${P}/connections/${id}/review">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="reject">
<label for="note-${id}">Reason of a rejection</label><input id="note-${id}" name="note" type="text" required>
<button type="submit">Reject ${escape(c.name)}</button></form></section>`
          }).join("")
          return html(
            v,
            msg?.status ?? 200,
            "Connections to review",
            `${nav}<p>${rows.length} pending review.</p>${items}`,
            msg?.text
          )
        }).pipe(Effect.catchTag("Refused", refusedPage(v))))
    yield* get(`${P}/connections`, connectionsPage)
    yield* post(`${P}/connections/:id/review`, (v, f) =>
      withOperator(v, (m) =>
        Effect.flatMap(HttpRouter.params, (p) =>
          Effect.gen(function*() {
            const decision = f["decision"] === "approve" ? "approve" as const : "reject" as const
            if (decision === "reject" && (f["note"] ?? "").trim() === "") {
              return html(
                v,
                400,
                "Connections to review",
                `<p><a href="${P}/connections">Back to the queue</a></p>`,
                "Give the reason of a rejection."
              )
            }
            yield* consoles.reviewConnection(m, p["id"] ?? "", decision, f["note"] ?? "")
            return redirect(v, `${P}/connections`)
          }))), connectionsPage)
  })
)

/** `POST /operator/v1/operator-accounts`: an operator's account, its password returned once. */
export const OperatorAccountsLive = HttpGroup.group(
  Api,
  "operatorAccounts",
  (handlers) =>
    Effect.map(Console, (consoles) =>
      handlers.handle("createOperatorAccount", ({ payload }) =>
        consoles.createOperator(payload.email).pipe(
          Effect.map((a) => ({ ...a, sign_in: `${P}/sign-in` })),
          Effect.catchTag(
            "Refused",
            (r) =>
              Effect.fail(r.status === 409 ? conflict("operator_account_exists", r.message) : invalid("invalid_email", r.message, "email"))
          )
        )))
)
