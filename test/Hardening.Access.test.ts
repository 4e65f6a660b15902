/**
 * Access that is checked first and ends at once (D19, issue 14 findings 4, 8 and 11, and the
 * request_id of log lines): a stored idempotent response is never replayed to a caller the
 * operation refuses; requests without a valid key are limited per address (while a known key of
 * that address goes on working, until it is refused: D20), and so are failed operator
 * authentications (D20); deleting an environment or a tenant ends its keys, its runs and its event
 * streams at once.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"

import { defaultEdgeConfig, defaultRunConfig } from "../src/Config/AppConfig.js"
import { makeTestApp, OPERATOR_TOKEN, TestApp } from "./support/App.js"
import { createKey, operator, readSse, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { captureOutput } from "./support/Output.js"
import { ALL_MANAGEMENT_SCOPES, isTerminal, sandboxWithKey, scriptedSandbox } from "./support/Sandboxes.js"
import { REFUND, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { eventually } from "./support/Waiting.js"

describe("a stored response is replayed only to a caller the operation accepts (D19, finding 4)", () => {
  it.live(
    "the same user, Idempotency-Key and body through a key without runs:write: 403, not the other key's 202",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        const conv = expectSingle(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
        const path = `${s.sb.P}/conversations/${conv.id}/runs`
        const body = { input: [{ type: "text", text: "refund order o-1" }] }
        const first = yield* request("POST", path, {
          key: s.key,
          body,
          idempotencyKey: "shared-key",
          headers: { "x-actor-token": yield* s.actorToken }
        })
        expect(expectSingle(first, 202).user_id).toBe(s.user.id)
        // A key that may open sessions and read runs, but not start them, acting for the same user.
        const reader = yield* createKey(s.sb.tenantId, ["actor-sessions:write", "runs:read", "conversations:read"], "reader")
        const session = expectSingle(yield* s.postSession(yield* s.assertion(), reader.secret), 201)
        const replayAttempt = yield* request("POST", path, {
          key: reader.secret,
          body,
          idempotencyKey: "shared-key",
          headers: { "x-actor-token": session.token }
        })
        expectError(replayAttempt, 403, "permission_error", "missing_scope")
        expect(replayAttempt.headers.get("idempotent-replayed")).toBeNull()
        expect(replayAttempt.text).not.toContain(first.body.data.id)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )
})

describe("requests without a valid key are limited per address (D19, finding 8)", () => {
  it.live(
    "a burst of 5 then 429 with Retry-After, for bad keys and the public key set; a key known to the address still works",
    () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        // the valid key authenticates once before the address is exhausted
        expect((yield* request("GET", `${s.P}/agents`, { key: s.key })).status).toBe(200)
        const statuses: Array<number> = []
        for (let i = 0; i < 5; i++) {
          statuses.push((yield* request("GET", `${s.P}/agents`, { key: `sk_test_wrong_${i}` })).status)
        }
        expect(statuses).toEqual([401, 401, 401, 401, 401])
        const refused = yield* request("GET", `${s.P}/agents`, { key: "sk_test_wrong_again" })
        expectError(refused, 429, "rate_limited", "rate_limited")
        expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expectErrorCode(yield* request("GET", `${s.P}/agents`), 429, "rate_limited") // no key at all
        expectErrorCode(yield* request("GET", `${s.P}/jwks.json`), 429, "rate_limited") // public, same bucket
        // the key this address used a moment ago is still looked up and accepted
        expect((yield* request("GET", `${s.P}/agents`, { key: s.key })).status).toBe(200)
        // refilled at 1 per second
        yield* Effect.sleep("1100 millis")
        expectErrorCode(yield* request("GET", `${s.P}/agents`, { key: "sk_test_wrong_later" }), 401, "invalid_api_key")
      }).pipe(Effect.provide(makeTestApp({ edge: { ...defaultEdgeConfig, clientRateLimit: { ratePerSecond: 1, burst: 5 } } }))),
    30_000
  )

  // D20: the operator plane spends from the same buckets; TestClock holds the refill (20/s, burst 40).
  it.effect(
    "D20: 200 wrong operator tokens from one address: 40 are 401, then 429 with Retry-After (/metrics too, and before any compare); the right token once refilled, and after",
    () =>
      Effect.zipRight(
        TestClock.setTime(Date.now()),
        Effect.gen(function*() {
          const statuses = new Map<number, number>()
          for (let i = 0; i < 200; i++) {
            const path = i % 2 === 0 ? "/operator/v1/cluster" : `/operator/v1/pilot-applications/pa_${i}`
            const r = yield* request("GET", path, { key: `op_wrong_${i}_${"x".repeat(40)}` })
            statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1)
            if (i === 199) {
              expectError(r, 429, "rate_limited", "rate_limited")
              expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
            }
          }
          expect(Object.fromEntries(statuses)).toEqual({ 401: 40, 429: 160 })
          expectErrorCode(yield* request("GET", "/metrics", { key: "op_wrong" }), 429, "rate_limited")
          expectErrorCode(yield* request("GET", "/operator/v1/cluster"), 429, "rate_limited") // no token at all
          // the address is refused before its token is compared: the right one too, until it refills
          expectErrorCode(yield* request("GET", "/operator/v1/cluster", { key: OPERATOR_TOKEN }), 429, "rate_limited")
          expectErrorCode(yield* request("GET", "/v1/openapi.json"), 429, "rate_limited") // one bucket with /v1
          yield* TestClock.adjust("1 second")
          expect((yield* request("GET", "/operator/v1/cluster", { key: OPERATOR_TOKEN })).status).toBe(200)
          expect((yield* request("GET", "/metrics", { key: OPERATOR_TOKEN })).status).toBe(200)
          // exhausted again by wrong tokens, the token that authenticated lately still works
          for (let i = 0; i < 25; i++) yield* request("GET", "/metrics", { key: "op_wrong_again" })
          expectErrorCode(yield* request("GET", "/metrics", { key: "op_wrong_again" }), 429, "rate_limited")
          expect((yield* request("GET", "/operator/v1/cluster", { key: OPERATOR_TOKEN })).status).toBe(200)
        }).pipe(Effect.provide(makeTestApp()))
      ),
    60_000
  )

  it.effect(
    "D20: a key that worked and is then revoked counts as no key: hammered from one address, 429 rate_limited after the burst",
    () =>
      Effect.zipRight(
        TestClock.setTime(Date.now()),
        Effect.gen(function*() {
          const sb = yield* sandboxWithKey(["keys:read", "keys:revoke", "users:read"])
          const doomed = yield* createKey(sb.tenantId, ["users:read"], "doomed")
          expect((yield* request("GET", `${sb.P}/users`, { key: doomed.secret })).status).toBe(200) // vouched for
          expectSingle(yield* request("POST", `${sb.P}/api-keys/${doomed.id}/revoke`, { key: sb.manager }))
          const statuses: Array<number> = []
          for (let i = 0; i < 7; i++) statuses.push((yield* request("GET", `${sb.P}/users`, { key: doomed.secret })).status)
          expect(statuses).toEqual([401, 401, 401, 401, 401, 429, 429])
          // the active key of the same address: it authenticated lately, it is still looked up
          expect((yield* request("GET", `${sb.P}/users`, { key: sb.manager })).status).toBe(200)
        }).pipe(Effect.provide(makeTestApp({ edge: { ...defaultEdgeConfig, clientRateLimit: { ratePerSecond: 1, burst: 5 } } })))
      ),
    30_000
  )
})

describe("deletion ends access at once (D19, finding 11)", () => {
  const slow = [{ type: "sleep", seconds: 120 }, { type: "text", text: "never" }]
  const settings = { runs: { ...defaultRunConfig, streamAuthCheckSeconds: 1, pingSeconds: 1 } }

  for (const what of ["environment", "tenant"] as const) {
    it.live(
      `deleting the ${what}: its keys are 401 key_revoked, its running run ends cancelled/environment_deleted, its stream closes`,
      () =>
        Effect.gen(function*() {
          const app = yield* TestApp
          const s = yield* scriptedSandbox(slow)
          const admin = yield* createKey(s.tenantId, ALL_MANAGEMENT_SCOPES, "admin")
          const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* eventually(s.getRun(run.id), (r) => r.status === "running")
          const url = `${app.baseUrl}${s.P}/runs/${run.id}/events/stream`
          const streaming = yield* Effect.fork(readSse(url, { authorization: `Bearer ${s.key}`, accept: "text/event-stream" }))
          yield* Effect.sleep("500 millis")

          const target = what === "environment" ? s.P : `/v1/tenants/${s.tenantId}`
          expectSingle(yield* request("DELETE", target, { key: admin.secret }), 202)
          const deletedAt = Date.now()
          for (const key of [s.key, admin.secret]) {
            expectError(yield* request("GET", `${s.P}/runs/${run.id}`, { key }), 401, "authentication_error", "key_revoked")
          }
          const stream = yield* streaming.await.pipe(Effect.flatten)
          expect(Date.now() - deletedAt).toBeLessThan(5_000)
          expect(stream.frames.map((f) => f.event)).toContain("run.started")

          const runPath = `/tenants/${s.tenantId}/environments/sandbox/runs/${run.id}`
          const ended = yield* eventually(
            Effect.map(operator("GET", runPath), (r) => r.body),
            (r) => isTerminal(r.status)
          )
          expect(ended).toMatchObject({ status: "cancelled", status_reason: "environment_deleted" })
          expect(Date.parse(ended.completed_at) - deletedAt).toBeLessThan(5_000)
        }).pipe(Effect.provide(makeTestApp(settings))),
      30_000
    )
  }
})

describe("log lines carry the request's id (D19, low findings)", () => {
  it.live("what a request logs is annotated with its request_id, the one in X-Request-Id", () =>
    Effect.gen(function*() {
      const output: Array<string> = []
      yield* captureOutput(output)
      const applied = yield* operator("POST", "/pilot-applications", { organization_name: "Logs Inc", contact_email: "ops@logs.test" })
      // approving provisions the sandbox and its quickstart, which is logged
      const approved = yield* request("POST", `/operator/v1/pilot-applications/${applied.body.id}/approve`, {
        key: OPERATOR_TOKEN,
        headers: { "x-request-id": "trace-approve-1" }
      })
      expect(approved.status, approved.text).toBe(200)
      expect(approved.headers.get("x-request-id")).toBe("trace-approve-1")
      const lines = output.join("").split("\n").filter((l) => l.includes("quickstart provisioned"))
      expect(lines.length).toBeGreaterThanOrEqual(1)
      expect(lines.every((l) => l.includes("request_id=trace-approve-1")), lines.join("\n")).toBe(true)
    }).pipe(Effect.scoped, Effect.provide(makeTestApp())), 30_000)
})
