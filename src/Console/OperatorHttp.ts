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
import { Console, type Member, type Refused } from "../Console.js"
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

    const statusOf = (v: Visit): Status | null => {
      const asked = v.query.get("status") ?? "submitted"
      return (STATUSES as ReadonlyArray<string>).includes(asked) ? asked as Status : null
    }
    /** Approve and reject (a reason required) forms of one item of a queue. */
    const decisionForms = (v: Visit, action: string, what: string, reasonField: string) => {
      const id = escape(action.split("/").at(-2) ?? "")
      return `<form method="post" action="${action}">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="approve"><button type="submit">Approve ${escape(what)}</button></form>
<form method="post" action="${action}">${csrfField(v.csrf)}
<input type="hidden" name="decision" value="reject">
<label for="${reasonField}-${id}">Reason of a rejection</label><input id="${reasonField}-${id}" name="${reasonField}" type="text" required>
<button type="submit">Reject ${escape(what)}</button></form>`
    }

    /** `POST {queue}/:id/decision` (approve, or reject with `reason`), then the queue of what it decided. */
    const decisionRoute = (
      queue: "pilots" | "production",
      decide: (m: Member, id: string, decision: "approve" | "reject", reason: string) => Effect.Effect<void, Refused>,
      again: Page
    ) =>
      post(`${P}/${queue}/:id/decision`, (v, f) =>
        withOperator(v, (m) =>
          Effect.flatMap(HttpRouter.params, (p) =>
            Effect.as(
              decide(m, p["id"] ?? "", f["decision"] === "approve" ? "approve" : "reject", f["reason"] ?? ""),
              redirect(v, `${P}/${queue}?status=${f["decision"] === "approve" ? "approved" : "rejected"}`)
            ))), again)

    const nav =
      `<nav aria-label="Queues"><a href="${P}/pilots">Pilot applications</a> · <a href="${P}/connections">Connections to review</a> · <a href="${P}/production">Production requests</a></nav>`

    yield* get(P, (v) => withOperator(v, () => Effect.succeed(redirect(v, `${P}/pilots`))))

    // ---- pilot applications ----

    const pilotsPage: Page = (v, msg) =>
      withOperator(v, (m) => {
        const status = statusOf(v)
        return Effect.map(consoles.pilotQueue(m, status), ({ counts, rows }) => {
          const count = (s: string) => counts.find((c) => c.status === s)?.n ?? 0
          const filters = [...STATUSES, "all" as const].map((s) => {
            const n = s === "all" ? counts.reduce((a, c) => a + c.n, 0) : count(s)
            const current = (status ?? "all") === s
            return `<li><a href="${P}/pilots?status=${s}"${current ? ` aria-current="page"` : ""}>${s} (${n})</a></li>`
          }).join("")
          const items = rows.map((r) => {
            const decide = r.status !== "submitted"
              ? ""
              : decisionForms(v, `${P}/pilots/${escape(r.id)}/decision`, r.organization_name, "reason")
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
    yield* decisionRoute("pilots", consoles.decidePilot, pilotsPage)

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
${decisionForms(v, `${P}/connections/${id}/review`, c.name, "note")}</section>`
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

    // ---- production requests ----

    const productionPage: Page = (v, msg) =>
      withOperator(v, (m) => {
        const status = statusOf(v)
        return Effect.map(consoles.productionQueue(m, status), (rows) => {
          const filters = [...STATUSES, "all" as const].map((s) =>
            `<li><a href="${P}/production?status=${s}"${(status ?? "all") === s ? ` aria-current="page"` : ""}>${s}</a></li>`
          ).join("")
          const items = rows.map((r) =>
            `<section aria-label="${escape(r.id)}"><h2>${escape(r.tenant_id)}</h2>
<dl><dt>Request</dt><dd>${escape(r.id)}</dd><dt>Status</dt><dd>${escape(r.status)}</dd><dt>Use case</dt><dd>${escape(r.use_case)}</dd>
<dt>Expected runs a month</dt><dd>${r.expected_monthly_runs}</dd><dt>Contact</dt><dd>${escape(r.contact_email)}</dd>
<dt>Submitted</dt><dd>${escape(r.created_at)}</dd>${
              r.decision_reason === null ? "" : `<dt>Reason</dt><dd>${escape(r.decision_reason)}</dd>`
            }</dl>${
              r.status === "submitted" ? decisionForms(v, `${P}/production/${escape(r.id)}/decision`, r.tenant_id, "reason") : ""
            }</section>`
          ).join("")
          return html(
            v,
            msg?.status ?? 200,
            "Production requests",
            `${nav}<ul class="filters">${filters}</ul><p>${rows.length} ${status ?? ""} requests.</p>${items}`,
            msg?.text
          )
        }).pipe(Effect.catchTag("Refused", refusedPage(v)))
      })
    yield* get(`${P}/production`, productionPage)
    yield* decisionRoute("production", consoles.decideProduction, productionPage)
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
