/**
 * The operator console's routes under `/operator/console` (issue 39): the same site as the
 * customer console (src/Console/Site.ts: sessions, CSRF, TOTP) with its own cookies and accounts
 * of kind `operator`, made by `npm run operator -- create-operator`. An operator sets up TOTP at
 * the first sign-in: no other page opens before. Decisions go through the operator plane's own
 * services and name the operator account (src/Console.ts).
 */
import { HttpApiBuilder, HttpRouter, type HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"

import { Api } from "../Api.js"
import { Console, type Member, type Refused } from "../Console.js"
import { conflict, invalid } from "../Kernel/Errors.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { csrfField, escape, form } from "./Pages.js"
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
      `<nav aria-label="Operator pages"><a href="${P}/pilots">Pilot applications</a> · <a href="${P}/connections">Connections to review</a> · <a href="${P}/production">Production requests</a> · <a href="${P}/tenants">Tenants</a> · <a href="${P}/cluster">Cluster</a> · <a href="${P}/metrics">Metrics</a> · <a href="${P}/tokens">API tokens</a></nav>`

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

    // ---- tenants and cells ----

    const iso = (d: Date | null) =>
      d === null ? "" : d.toISOString()
    const table = (caption: string, head: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) =>
      rows.length === 0
        ? `<p>No ${escape(caption.toLowerCase())}.</p>`
        : `<table><caption>${escape(caption)}</caption><thead><tr>${
          head.map((h) => `<th scope="col">${escape(h)}</th>`).join("")
        }</tr></thead>
<tbody>${
          rows.map((r) =>
            `<tr>${r.map((c) => `<td>${c}</td>`).join("")}</tr>`
          ).join("")
        }</tbody></table>`

    const tenantsPage: Page = (v, msg) =>
      withOperator(v, (m) =>
        Effect.map(consoles.tenants(m), (tenants) =>
          html(
            v,
            msg?.status ?? 200,
            "Tenants",
            `${nav}<p>${tenants.length} tenants, newest first.</p>${
              table(
                "Tenants",
                ["Tenant", "Status", "Environments", "Created"],
                tenants.map((t) => [
                  `<a href="${P}/tenants/${encodeURIComponent(t.id)}">${escape(t.name)}</a><br><code>${escape(t.id)}</code>`,
                  escape(t.status),
                  t.environments.map((e) => `${escape(e.name)}: ${escape(e.state)}`).join("<br>"),
                  iso(t.created_at)
                ])
              )
            }`,
            msg?.text
          )).pipe(Effect.catchTag("Refused", refusedPage(v))))
    yield* get(`${P}/tenants`, tenantsPage)

    const tenantPage: Page = (v, msg) =>
      withOperator(v, (m) =>
        Effect.flatMap(HttpRouter.params, (p) =>
          Effect.map(consoles.tenant(m, p["id"] ?? ""), (t) => {
            const base = `${P}/tenants/${encodeURIComponent(t.id)}/environments`
            const environments = t.environments.map((e) => {
              const at = `${base}/${encodeURIComponent(e.name)}`
              const keys = table(
                `Keys of ${e.name}`,
                ["Name", "Prefix", "Scopes", "Status", "Created"],
                e.keys.map((k) => [
                  escape(k.name),
                  `<code>${escape(k.prefix)}</code>`,
                  escape(k.scopes.join(", ")),
                  escape(k.status),
                  escape(k.created_at)
                ])
              )
              const quotas = e.quotas === null ? "<p>No quotas: the environment is being deleted.</p>" : table(
                `Quotas of ${e.name}`,
                ["Quota", "Used", "Limit", "Resets"],
                e.quotas.map((q) => {
                  const field = `limit-${e.name}-${q.name}`
                  return [
                    `<code>${escape(q.name)}</code>`,
                    String(q.used),
                    `<form method="post" action="${at}/quotas/${q.name}" class="inline">${csrfField(v.csrf)}
<label for="${field}">Limit of ${escape(q.name)} (${
                      escape(e.name)
                    })</label><input id="${field}" name="limit" type="text" inputmode="numeric" required value="${q.limit}">
<button type="submit">Set</button></form>`,
                    escape(q.resets_at ?? "")
                  ]
                })
              )
              const runs = table(
                `Latest runs of ${e.name}`,
                ["Run", "State", "Reason", "Created", "Ended"],
                e.runs.map((r) => [
                  `<a href="${at}/runs/${encodeURIComponent(r.id)}"><code>${escape(r.id)}</code></a>`,
                  escape(r.status),
                  escape(r.status_reason ?? ""),
                  iso(r.created_at),
                  iso(r.completed_at)
                ])
              )
              const rotate = `<form method="post" action="${at}/signing-keys/rotate">${csrfField(v.csrf)}
<input type="checkbox" id="confirm-${e.name}" name="confirm" value="yes" required>
<label for="confirm-${e.name}" class="check">Rotate the tool-invocation signing key of ${
                escape(e.name)
              }: the current key stays published until the tokens it signed expire</label>
<button type="submit">Rotate the signing key of ${escape(e.name)}</button></form>`
              return `<section aria-label="Environment ${escape(e.name)}"><h2>${escape(e.name)}: ${escape(e.state)}</h2>
${keys}${quotas}${runs}<h3>Signing key</h3>${rotate}</section>`
            }).join("")
            return html(
              v,
              msg?.status ?? 200,
              `Tenant ${t.name}`,
              `${nav}<dl><dt>Tenant</dt><dd><code>${escape(t.id)}</code></dd><dt>Status</dt><dd>${escape(t.status)}</dd>
<dt>Created</dt><dd>${iso(t.created_at)}</dd></dl>${environments}`,
              msg?.text
            )
          }).pipe(Effect.catchTag("Refused", refusedPage(v)))))
    yield* get(`${P}/tenants/:id`, tenantPage)

    const envParams = Effect.map(HttpRouter.params, (p) => ({ id: p["id"] ?? "", env: p["env"] ?? "", name: p["name"] ?? "" }))
    yield* post(`${P}/tenants/:id/environments/:env/quotas/:name`, (v, f) =>
      withOperator(v, (m) =>
        Effect.flatMap(envParams, ({ env, id, name }) =>
          Effect.as(
            consoles.setQuota(m, id, env, name, f["limit"] ?? ""),
            redirect(v, `${P}/tenants/${encodeURIComponent(id)}`)
          ))), tenantPage)

    yield* post(`${P}/tenants/:id/environments/:env/signing-keys/rotate`, (v, f) =>
      withOperator(v, (m) =>
        Effect.flatMap(envParams, ({ env, id }) =>
          f["confirm"] !== "yes"
            ? tenantPage(v, { status: 400, text: "Tick the confirmation to rotate the signing key." })
            : Effect.map(consoles.rotateSigningKey(m, id, env), (rotated) =>
              html(
                v,
                200,
                "Signing key rotated",
                `<p class="note">The ${escape(env)} signing key of <code>${escape(id)}</code> is now <code>${escape(rotated.kid)}</code>.
The previous key stays published until ${rotated.retired_publish_until.toISOString()}.</p>
<p><a href="${P}/tenants/${encodeURIComponent(id)}">Back to the tenant</a></p>`
              )))), tenantPage)

    yield* get(`${P}/tenants/:id/environments/:env/runs/:run`, (v) =>
      withOperator(v, (m) =>
        Effect.flatMap(HttpRouter.params, (p) =>
          Effect.map(consoles.run(m, p["id"] ?? "", p["env"] ?? "", p["run"] ?? ""), (run) =>
            html(
              v,
              200,
              `Run ${run.id}`,
              `${nav}<p><a href="${P}/tenants/${encodeURIComponent(p["id"] ?? "")}">Back to the tenant</a></p>${json(run)}`
            )))).pipe(Effect.catchTag("Refused", refusedPage(v))))

    const clusterPage: Page = (v) =>
      withOperator(v, (m) =>
        Effect.map(consoles.cluster(m), (c) =>
          html(
            v,
            200,
            "Cluster",
            `${nav}${
              table(
                "Runners",
                ["Address", "Health", "Last heartbeat", "This node"],
                c.runners.map((r) => [
                  `<code>${escape(r.address)}</code>`,
                  r.healthy ? "healthy" : "unhealthy",
                  escape(r.last_heartbeat),
                  r.self ? "yes" : ""
                ])
              )
            }${
              table(
                "Active cells and the node that owns each",
                ["Tenant", "Environment", "Node", "Generation", "Since"],
                c.cells.map((cell) => [
                  `<a href="${P}/tenants/${encodeURIComponent(cell.tenant_id)}"><code>${escape(cell.tenant_id)}</code></a>`,
                  escape(cell.environment),
                  `<code>${escape(cell.runner)}</code>`,
                  String(cell.generation),
                  escape(cell.started_at)
                ])
              )
            }`
          )).pipe(Effect.catchTag("Refused", refusedPage(v))))
    yield* get(`${P}/cluster`, clusterPage)

    // ---- metrics at a glance ----

    const figure = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 2 : 1))
    /**
     * A horizontal bar chart drawn on the server (inline SVG: the pages load no script), one bar per
     * item with its figure written beside it; the table after the charts has the same figures.
     */
    const bars = (title: string, unit: string, items: ReadonlyArray<{ readonly label: string; readonly value: number }>) => {
      if (items.length === 0) {
        return `<p>${escape(title)}: nothing yet.</p>`
      }
      const max = Math.max(
        ...items.map((i) =>
          i.value
        ),
        Number.MIN_VALUE
      )
      const row = 22
      const labelWidth = 320
      const barWidth = 250
      const width = labelWidth + barWidth + 120
      const drawn = items.map((item, k) => {
        const w = Math.round((item.value / max) * barWidth)
        const y = 4 + k * row
        return `<text x="0" y="${y + 14}" font-size="12">${escape(item.label)}</text>` +
          `<rect x="${labelWidth}" y="${y + 2}" width="${Math.max(w, 1)}" height="14" fill="#1f4e8c"></rect>` +
          `<text x="${labelWidth + w + 6}" y="${y + 14}" font-size="12">${escape(`${figure(item.value)} ${unit}`)}</text>`
      }).join("")
      return `<figure><figcaption>${escape(title)}</figcaption><svg role="img" aria-label="${
        escape(`${title}: ${items.map((i) => `${i.label} ${figure(i.value)} ${unit}`).join(", ")}`)
      }" viewBox="0 0 ${width} ${items.length * row + 8}" width="100%">${drawn}</svg></figure>`
    }

    const metricsPage: Page = (v) =>
      withOperator(v, (m) =>
        Effect.map(consoles.metrics(m), ({ backlog, cells, uptimeSeconds }) => {
          const label = (c: { readonly tenant_id: string; readonly environment: string }) =>
            `${c.tenant_id}/${c.environment}`
          const rows = cells.map((c) => {
            const steps = c.share.resources.steps
            const db = c.share.resources.db
            return {
              cell: c,
              activeRuns: c.running_actors + c.parked_runs,
              stepsPerSecond: steps.grants / uptimeSeconds,
              dbWaitMillis: db.grants === 0 ? 0 : (db.waited_seconds * 1000) / db.grants
            }
          })
          return html(
            v,
            200,
            "Metrics at a glance",
            `${nav}<p>Active cells with their runs now (from each cell, wherever it runs); the work and waits are this node's since it started ${
              escape(figure(uptimeSeconds / 60))
            } minutes ago (every node has its own: see <code>/metrics</code>).</p>${
              bars("Active runs per cell (executing or parked)", "runs", rows.map((r) => ({ label: label(r.cell), value: r.activeRuns })))
            }${
              bars("Work granted per cell on this node", "steps/s", rows.map((r) => ({ label: label(r.cell), value: r.stepsPerSecond })))
            }${
              bars(
                "Mean wait for a database connection on this node",
                "ms",
                rows.map((r) => ({ label: label(r.cell), value: r.dbWaitMillis }))
              )
            }${bars("Webhook deliveries waiting to be sent", "pending", backlog.map((b) => ({ label: label(b), value: b.pending })))}${
              table(
                "Cells",
                ["Tenant", "Environment", "Node", "Runs executing", "Runs parked", "Streams", "Steps/s here", "Mean DB wait here"],
                rows.map((r) => [
                  `<a href="${P}/tenants/${encodeURIComponent(r.cell.tenant_id)}"><code>${escape(r.cell.tenant_id)}</code></a>`,
                  escape(r.cell.environment),
                  `<code>${escape(r.cell.runner)}</code>`,
                  String(r.cell.running_actors),
                  String(r.cell.parked_runs),
                  String(r.cell.streams),
                  figure(r.stepsPerSecond),
                  `${figure(r.dbWaitMillis)} ms`
                ])
              )
            }${
              table(
                "Webhook backlog",
                ["Tenant", "Environment", "Pending deliveries", "Oldest due"],
                backlog.map((b) => [`<code>${escape(b.tenant_id)}</code>`, escape(b.environment), String(b.pending), iso(b.oldest_due)])
              )
            }`
          )
        }).pipe(Effect.catchTag("Refused", refusedPage(v))))
    yield* get(`${P}/metrics`, metricsPage)

    // ---- personal API tokens: the operator API and the CLI audited with the account's id ----

    const tokensPage: Page = (v, msg) =>
      withOperator(v, (m) =>
        Effect.map(consoles.operatorTokens(m), (tokens) =>
          html(
            v,
            msg?.status ?? 200,
            "API tokens",
            `${nav}<p>A personal token calls the operator API (<code>/operator/v1</code>, <code>GET /metrics</code>) and the CLI
(<code>OPERATOR_TOKEN=opk_... npm run operator -- ...</code>) as you: each action is audited with your account's id. The shared
<code>OPERATOR_TOKEN</code> stays for automation and is audited as <code>operator</code>.</p>` +
              table(
                "Tokens",
                ["Name", "Prefix", "Created", "Last used", "Status", ""],
                tokens.map((t) => [
                  escape(t.name),
                  `<code>${escape(t.prefix)}...</code>`,
                  iso(t.created_at),
                  iso(t.last_used_at),
                  t.revoked_at === null ? "live" : `revoked ${iso(t.revoked_at)}`,
                  t.revoked_at === null
                    ? `<form method="post" action="${P}/tokens/${encodeURIComponent(t.id)}/revoke">${csrfField(v.csrf)}
<button type="submit">Revoke ${escape(t.name)}</button></form>`
                    : ""
                ])
              ) +
              `<h2>New token</h2>` +
              form(`${P}/tokens`, v.csrf, [
                { name: "name", label: "Token name", type: "text", value: "" },
                { name: "code", label: "Current two-factor code", type: "text", autocomplete: "one-time-code", inputmode: "numeric" }
              ], "Create token"),
            msg?.text
          ))).pipe(Effect.catchTag("Refused", refusedPage(v)))
    yield* get(`${P}/tokens`, tokensPage)
    yield* post(`${P}/tokens`, (v, f) =>
      withOperator(v, (m) =>
        Effect.gen(function*() {
          yield* consoles.checkMfa(m, v.session!, f["code"] ?? "")
          const fresh = yield* consoles.member(v.session!)
          const created = yield* consoles.createOperatorToken(Option.getOrThrow(fresh), f["name"] ?? "")
          return html(
            v,
            201,
            "Your token",
            `<p class="note">Copy this token now: it is shown only once, and only its hash is kept. Keep it in a secret
manager or your shell's environment (<code>OPERATOR_TOKEN</code>), never in a repository or a browser. If it leaks, revoke it.</p>
<p class="secret" aria-label="Token secret"><code id="secret">${escape(created.secret)}</code></p>
<p><a href="${P}/tokens">Back to your tokens</a></p>`
          )
        })), tokensPage)
    yield* post(`${P}/tokens/:id/revoke`, (v) =>
      withOperator(v, (m) =>
        Effect.flatMap(HttpRouter.params, (p) =>
          Effect.as(consoles.revokeOperatorToken(m, p["id"] ?? ""), redirect(v, `${P}/tokens`)))), tokensPage)
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
