/**
 * The production request (D17): from a sandbox's request to an approved `production` environment,
 * an operator-made `sk_live_` key there that runs a scripted run to `succeeded`, and the
 * `production_request.decided` webhook delivery to the sandbox's endpoint; one open request per
 * tenant under concurrency (409 `production_request_open`); reject, then a new request; the
 * operator CLI's commands against the running service.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

import { defaultQuotaDefaults } from "../src/Config/QuotaDefaults.js"
import { makeTestApp } from "./support/App.js"
import { cli, CLI_COMMANDS } from "./support/Cli.js"
import { operator, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { agentFixture, isTerminal, RUN_SCOPES, sandboxWithKey, scriptedProfile } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"
import { startReceiver, verify } from "./support/WebhookReceiver.js"
import { waitFor, WEBHOOK_SCOPES, webhookSettings } from "./support/WebhookSandbox.js"

const BODY = { use_case: "Support agent for our customers", expected_monthly_runs: 5000, contact_email: "ops@acme.test" }
const ENVIRONMENT_SCOPES = ["environments:read", "environments:write"]

/** A sandbox with a key that may request production (and read and register webhooks). */
const requester = (organization: string) => sandboxWithKey([...ENVIRONMENT_SCOPES, ...WEBHOOK_SCOPES], "requester", organization)

const productionEnvironments = (tenantId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM environments WHERE tenant_id = ${tenantId} AND name = 'production'`.pipe(
        Effect.orDie,
        Effect.map(([row]) => row!.n)
      )
  )

layer(makeTestApp(webhookSettings()), { excludeTestServices: true, timeout: "120 seconds" })("the production request (D17)", (it) => {
  it.effect("request -> approval -> production ready without keys -> an operator's sk_live_ key runs a scripted run", () =>
    Effect.scoped(Effect.gen(function*() {
      const sb = yield* requester("Acme")
      const receiver = yield* startReceiver()
      const endpoint = expectSingle(
        yield* request("POST", `${sb.P}/webhook-endpoints`, {
          key: sb.manager,
          body: { url: receiver.url, event_types: ["production_request.decided"] }
        }),
        201
      )
      const prodP = `/v1/tenants/${sb.tenantId}/environments/production`
      expectError(yield* request("GET", `${sb.P}/production-request`, { key: sb.manager }), 404, "not_found", "resource_missing")
      // only on the sandbox; unknown fields refused; the scope is environments:write
      const onProduction = yield* request("POST", `${prodP}/production-request`, { key: sb.manager, body: BODY })
      expectError(onProduction, 404, "not_found", "resource_missing", "environment")
      expectError(
        yield* request("POST", `${sb.P}/production-request`, { key: sb.manager, body: { ...BODY, plan: "gold" } }),
        400,
        "invalid_request",
        "unknown_parameter",
        "plan"
      )
      expectErrorCode(yield* request("POST", `${sb.P}/production-request`, { key: sb.key, body: BODY }), 403, "missing_scope")

      const submitted = expectSingle(yield* request("POST", `${sb.P}/production-request`, { key: sb.manager, body: BODY }), 201)
      expect(submitted).toEqual({
        id: expect.stringMatching(/^preq_/),
        object: "production_request",
        status: "submitted",
        ...BODY,
        created_at: expect.any(String),
        decided_at: null,
        decision_reason: null
      })
      expect(expectSingle(yield* request("GET", `${sb.P}/production-request`, { key: sb.manager }))).toEqual(submitted)
      const seen = yield* operator("GET", `/production-requests/${submitted.id}`)
      expect(seen.body).toEqual({ ...submitted, tenant_id: sb.tenantId })
      expect(yield* productionEnvironments(sb.tenantId)).toBe(0)

      const approved = yield* operator("POST", `/production-requests/${submitted.id}/approve`)
      expect(approved.status, approved.text).toBe(200)
      expect(approved.body).toMatchObject({ id: submitted.id, status: "approved", tenant_id: sb.tenantId, decision_reason: null })
      expect(approved.body.decided_at).toEqual(expect.any(String))
      // approving again answers the same and creates nothing twice; a rejection now is 409
      const again = yield* operator("POST", `/production-requests/${submitted.id}/approve`, {})
      expect(again.body).toEqual(approved.body)
      expect(yield* productionEnvironments(sb.tenantId)).toBe(1)
      expectErrorCode(yield* operator("POST", `/production-requests/${submitted.id}/reject`, {}), 409, "already_decided")
      const { tenant_id: _, ...decided } = approved.body
      expect(expectSingle(yield* request("GET", `${sb.P}/production-request`, { key: sb.manager }))).toEqual(decided)
      expectErrorCode(
        yield* request("POST", `${sb.P}/production-request`, { key: sb.manager, body: BODY }),
        409,
        "production_environment_exists"
      )

      // production is ready, with no keys until an operator makes one
      const sql = yield* SqlClient.SqlClient
      const [production] = yield* sql<{ state: string }>`
        SELECT state FROM environments WHERE tenant_id = ${sb.tenantId} AND name = 'production'`.pipe(Effect.orDie)
      expect(production!.state).toBe("ready")
      // each approval's audit entry, of the operator, in the sandbox's log (the second approval too: it answered 200)
      const audited = yield* sql<{ actor_type: string; resource_type: string; resource_id: string; status: number }>`
        SELECT actor_type, resource_type, resource_id, status FROM audit_entries
        WHERE tenant_id = ${sb.tenantId} AND environment = 'sandbox' AND action = 'approveProductionRequest'`.pipe(Effect.orDie)
      expect(audited).toEqual([1, 2].map(() => ({
        actor_type: "operator",
        resource_type: "production_request",
        resource_id: submitted.id,
        status: 200
      })))
      const [keys] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM api_keys WHERE tenant_id = ${sb.tenantId} AND environment = 'production'`.pipe(Effect.orDie)
      expect(keys!.n).toBe(0)
      const made = yield* operator("POST", `/tenants/${sb.tenantId}/environments/production/api-keys`, { name: "live", scopes: RUN_SCOPES })
      expect(made.status, made.text).toBe(201)
      expect(made.body).toMatchObject({ environment: "production", prefix: expect.stringMatching(/^sk_live_/) })
      const live: string = made.body.secret
      expect(live).toMatch(/^sk_live_[A-Za-z0-9_-]{43}$/)

      // a scripted run in production, to succeeded
      const { rev, ws } = yield* agentFixture(prodP, live, {
        profile: scriptedProfile([{ type: "text", text: "Live: {{input}}" }]),
        instructions: "Be brief.",
        tool_ids: []
      })
      const conversation = expectSingle(
        yield* request("POST", `${prodP}/conversations`, { key: live, body: { workspace_id: ws.id, agent_revision_id: rev.id } }),
        201
      )
      const run = expectSingle(
        yield* request("POST", `${prodP}/conversations/${conversation.id}/runs`, {
          key: live,
          body: { input: [{ type: "text", text: "hello" }] }
        }),
        202
      )
      const ended = yield* eventually(
        Effect.map(request("GET", `${prodP}/runs/${run.id}`, { key: live }), (r) => expectSingle(r)),
        (r) => isTerminal(r.status)
      )
      expect(ended.status).toBe("succeeded")
      // production has the large quota defaults (D16), the run counted against them
      const quotas = yield* operator("GET", `/tenants/${sb.tenantId}/environments/production/quotas`)
      expect(quotas.body.items.map((q: any) => [q.name, q.limit])).toEqual(Object.entries(defaultQuotaDefaults.production))
      expect(quotas.body.items[0]).toMatchObject({ name: "runs_per_day", used: 1 })
      expect(defaultQuotaDefaults.production.runs_per_day).toBeGreaterThan(defaultQuotaDefaults.sandbox.runs_per_day)
      // the sandbox's key cannot reach production
      expectErrorCode(yield* request("GET", `${prodP}/runs/${run.id}`, { key: sb.key }), 404, "resource_missing")

      // the decision, announced once to the sandbox's endpoint
      yield* waitFor(Effect.sync(() => receiver.received.length), (n) => n >= 1)
      const body = yield* verify(endpoint.secret, receiver.received[0]!)
      expect(body).toMatchObject({ type: "production_request.decided", tenant_id: sb.tenantId, environment: "sandbox", data: decided })
      const deliveries = expectList(yield* request("GET", `${sb.P}/webhook-deliveries`, { key: sb.manager })).items
      expect(deliveries.map((d) => d.event_type)).toEqual(["production_request.decided"])
      expect(deliveries[0]).toMatchObject({ id: body.id, event_id: expect.stringMatching(/^evt_/), endpoint_id: endpoint.id })

      // once production is purged (its row stays, `deleted`), the tenant may ask again; approval makes it anew
      const [before] = yield* sql<{ id: string }>`
        UPDATE environments SET state = 'deleted' WHERE tenant_id = ${sb.tenantId} AND name = 'production' RETURNING id`.pipe(
        Effect.orDie
      )
      const renewed = expectSingle(yield* request("POST", `${sb.P}/production-request`, { key: sb.manager, body: BODY }), 201)
      expect((yield* operator("POST", `/production-requests/${renewed.id}/approve`)).status).toBe(200)
      const [after] = yield* sql<{ id: string; state: string }>`
        SELECT id, state FROM environments WHERE tenant_id = ${sb.tenantId} AND name = 'production'`.pipe(Effect.orDie)
      expect(after).toEqual({ id: expect.stringMatching(/^env_/), state: "ready" })
      expect(after!.id).not.toBe(before!.id)
    })))

  it.effect("one open request per tenant, atomically; a rejection records its reason and a new request may follow", () =>
    Effect.gen(function*() {
      const sb = yield* requester("Beta")
      const post = request("POST", `${sb.P}/production-request`, { key: sb.manager, body: BODY })
      const answers = yield* Effect.all(Array.from({ length: 8 }, () => post), { concurrency: "unbounded" })
      expect(answers.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409])
      for (const r of answers.filter((r) => r.status === 409)) expectErrorCode(r, 409, "production_request_open")
      const first = answers.find((r) => r.status === 201)!.body.data

      const rejected = yield* operator("POST", `/production-requests/${first.id}/reject`, { reason: "Tell us more about the volume" })
      expect(rejected.status, rejected.text).toBe(200)
      expect(rejected.body).toMatchObject({ status: "rejected", decision_reason: "Tell us more about the volume" })
      expect((yield* operator("POST", `/production-requests/${first.id}/reject`)).body).toEqual(rejected.body)
      expectErrorCode(yield* operator("POST", `/production-requests/${first.id}/approve`, {}), 409, "already_decided")
      expectErrorCode(
        yield* operator("POST", `/production-requests/${first.id}/reject`, { reason: "x", extra: 1 }),
        400,
        "unknown_parameter"
      )
      expect(expectSingle(yield* request("GET", `${sb.P}/production-request`, { key: sb.manager }))).toMatchObject({
        id: first.id,
        status: "rejected",
        decision_reason: "Tell us more about the volume"
      })
      expect(yield* productionEnvironments(sb.tenantId)).toBe(0)

      const second = expectSingle(yield* post, 201)
      expect(second.id).not.toBe(first.id)
      expect(expectSingle(yield* request("GET", `${sb.P}/production-request`, { key: sb.manager })).id).toBe(second.id)
      const open = yield* operator("GET", "/production-requests?status=submitted&limit=100")
      const ids = open.body.items.map((r: any) => r.id)
      expect(ids).toContain(second.id)
      expect(ids).not.toContain(first.id)
      expectErrorCode(yield* operator("GET", "/production-requests/preq_nope"), 404, "resource_missing")

      // a tenant being deleted gets no production environment
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE tenants SET status = 'deleting' WHERE id = ${sb.tenantId}`.pipe(Effect.orDie)
      expectErrorCode(yield* operator("POST", `/production-requests/${second.id}/approve`), 409, "tenant_not_active")
      expect(yield* productionEnvironments(sb.tenantId)).toBe(0)
    }))

  it.effect("the operator CLI approves and rejects production requests (plain text, or --json)", () =>
    Effect.gen(function*() {
      const submit = (organization: string) =>
        Effect.gen(function*() {
          const sb = yield* requester(organization)
          const submitted = expectSingle(yield* request("POST", `${sb.P}/production-request`, { key: sb.manager, body: BODY }), 201)
          return { sb, id: submitted.id as string }
        })
      const [a, b] = yield* Effect.all([submit("Gamma"), submit("Delta")])
      const [help, approved, rejected] = yield* Effect.all([
        cli(["--help"]),
        cli(["approve-production", a.id]),
        cli(["reject-production", "--reason", "Tell us more", b.id, "--json"])
      ], { concurrency: "unbounded" })

      expect(help.code, help.stderr).toBe(0)
      for (const command of CLI_COMMANDS) {
        const line = help.stdout.split("\n").find((l) => l.includes(`- ${command} `))
        expect(line, command).toMatch(/\S\s{2,}[A-Z][a-z]+\W/) // usage, then its description
      }

      // plain text: `key: value` lines, and the next step on stderr
      expect(approved.code, approved.stderr).toBe(0)
      expect(approved.stdout).toMatch(/^status: approved$/m)
      expect(approved.stdout).toContain(`tenant_id: ${a.sb.tenantId}`)
      expect(approved.stdout).not.toContain("{")
      expect(approved.stderr).toContain(`create-key --tenant ${a.sb.tenantId} --environment production`)
      expect(expectSingle(yield* request("GET", `${a.sb.P}/production-request`, { key: a.sb.manager })).status).toBe("approved")
      expect(yield* productionEnvironments(a.sb.tenantId)).toBe(1)

      // --json: the answer itself
      expect(rejected.code, rejected.stderr).toBe(0)
      expect(JSON.parse(rejected.stdout)).toMatchObject({
        id: b.id,
        status: "rejected",
        decision_reason: "Tell us more",
        tenant_id: b.sb.tenantId
      })
      expect(yield* productionEnvironments(b.sb.tenantId)).toBe(0)
    }))
})
