/**
 * API key rotation with grace (D17) over HTTP, on TestClock: the new key (same name, kind and
 * scopes, `rotated_from`, its secret once, null in a replay); the old key working until its grace
 * ends, then 401 `key_expired`, listed `expired`, its failed requests audited and spending the
 * client address's bucket (D19); grace 0; a run of the old key ended before its next dispatch
 * (`authorization_revoked`); 409 for a rotated, expired or revoked key; scope, ceiling, tenancy and
 * `grace_seconds` refusals, which change nothing.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"

import { defaultEdgeConfig, defaultRunConfig } from "../src/Config/AppConfig.js"
import { makeTestApp } from "./support/App.js"
import { createKey, provisionSandbox, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { ALL_MANAGEMENT_SCOPES, isTerminal, RUNNER_SCOPES, sandboxWithManager, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

const rotate = (P: string, key: string, id: string, body: unknown = {}, idempotencyKey?: string) =>
  request("POST", `${P}/api-keys/${id}/rotate`, { key, body, ...(idempotencyKey ? { idempotencyKey } : {}) })

describe("API key rotation (D17)", () => {
  it.effect(
    "grace on TestClock: the old key works until it ends, then 401 key_expired, listed expired; the new key works",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const sb = yield* sandboxWithManager()
          const old = yield* createKey(sb.tenantId, ["users:read"], "worker")
          const users = (key: string) => request("GET", `${sb.P}/users`, { key })

          const res = yield* rotate(sb.P, sb.manager, old.id, { grace_seconds: 600 }, "rotate-worker")
          const made = expectSingle(res, 201)
          expect(made).toMatchObject({
            object: "api_key",
            name: "worker",
            kind: "console",
            scopes: ["users:read"],
            status: "active",
            rotated_from: old.id,
            expires_at: null,
            revoked_at: null
          })
          expect(made.id).not.toBe(old.id)
          expect(made.secret).toMatch(/^sk_test_/)
          expect(made.prefix).toBe(made.secret.slice(0, 16))

          // An idempotent replay: the same key, its secret not shown again.
          const replay = yield* rotate(sb.P, sb.manager, old.id, { grace_seconds: 600 }, "rotate-worker")
          expect(replay.headers.get("idempotent-replayed")).toBe("true")
          expect(expectSingle(replay, 201)).toEqual({ ...made, secret: null })

          const oldKey = expectSingle(yield* request("GET", `${sb.P}/api-keys/${old.id}`, { key: sb.manager }))
          expect(oldKey).toMatchObject({ status: "active", rotated_from: null })
          expect(Date.parse(oldKey.expires_at) - Date.parse(made.created_at)).toBe(600_000)

          // Rotating it again within its grace: 409 (one successor per key; the grace is not extended).
          expectError(yield* rotate(sb.P, sb.manager, old.id), 409, "conflict", "key_already_rotated")

          expectList(yield* users(old.secret))
          expectList(yield* users(made.secret))
          yield* TestClock.adjust("599 seconds")
          expectList(yield* users(old.secret))
          yield* TestClock.adjust("1 second")
          expectError(yield* users(old.secret), 401, "authentication_error", "key_expired")
          expectList(yield* users(made.secret))

          const listed = expectList(yield* request("GET", `${sb.P}/api-keys`, { key: sb.manager }))
          const statusOf = (id: string) => listed.items.find((k) => k.id === id)?.status
          expect([statusOf(old.id), statusOf(made.id)]).toEqual(["expired", "active"])
          expect(expectSingle(yield* request("GET", `${sb.P}/api-keys/${old.id}`, { key: sb.manager })).status).toBe("expired")
          expectError(yield* rotate(sb.P, sb.manager, old.id), 409, "conflict", "key_not_active")

          // D19: the expired key's failed request is audited in its environment ...
          const audited = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM audit_entries WHERE key_id = ${old.id} AND status = 401`.pipe(Effect.orDie)
          expect(audited[0]!.n).toBe(1)
          // ... and requests with it spend the address's bucket (burst 3 here) like any invalid key.
          yield* TestClock.adjust("10 minutes") // the old key is no longer "recently authenticated"; the bucket refills
          expectList(yield* users(made.secret))
          const answers: Array<string> = []
          for (let i = 0; i < 4; i++) answers.push(`${(yield* users(old.secret)).body?.error?.code}`)
          expect(answers).toEqual(["key_expired", "key_expired", "key_expired", "rate_limited"])
          expectList(yield* users(made.secret)) // a key that authenticated lately still gets through
        }).pipe(Effect.provide(makeTestApp({ edge: { ...defaultEdgeConfig, clientRateLimit: { ratePerSecond: 1, burst: 3 } } })))
      }),
    { timeout: 60_000 }
  )

  it.effect(
    "grace 0 expires the old key at once; a run of an expired key ends before its dispatch (authorization_revoked)",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const s = yield* scriptedSandbox([{ type: "sleep", seconds: 30 }, { type: "text", text: "ok" }])
          const runner = yield* createKey(s.tenantId, RUNNER_SCOPES, "runner")
          // One execution slot: the manager's run holds it (30 s on TestClock) while the runner's waits.
          const blocker = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* eventually(s.getRun(blocker.id), (r) => r.status === "running")
          const queued = expectSingle(yield* s.startRun((yield* s.conversation(runner.secret)).id, "x", { key: runner.secret }), 202)
          expect((yield* s.getRun(queued.id)).status).toBe("queued")

          const next = expectSingle(yield* rotate(s.P, s.key, runner.id, { grace_seconds: 10 }), 201)
          expect(next).toMatchObject({ rotated_from: runner.id, scopes: runner.scopes, name: "runner" })
          expect((yield* s.getRun(queued.id, runner.secret)).status).toBe("queued") // still within its grace

          yield* TestClock.adjust("31 seconds")
          const ended = yield* eventually(s.getRun(queued.id), (r) => isTerminal(r.status))
          expect(ended).toMatchObject({ status: "failed", status_reason: "authorization_revoked", started_at: null })
          expect((yield* eventually(s.getRun(blocker.id), (r) => isTerminal(r.status))).status).toBe("succeeded")

          // grace 0: the rotated key is expired from the answer on; the new one works.
          const last = expectSingle(yield* rotate(s.P, s.key, next.id, { grace_seconds: 0 }), 201)
          const expired = expectSingle(yield* request("GET", `${s.P}/api-keys/${next.id}`, { key: s.key }))
          expect(expired).toMatchObject({ status: "expired", expires_at: last.created_at })
          expectErrorCode(yield* request("GET", `${s.P}/runs/${queued.id}`, { key: next.secret }), 401, "key_expired")
          expect((yield* s.getRun(queued.id, last.secret)).status).toBe("failed")
        }).pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, maxActiveRunsPerCell: 1 } })))
      }),
    { timeout: 60_000 }
  )

  it.live("refusals: scope, ceiling, tenancy, a revoked key, grace_seconds; none changes anything", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* sandboxWithManager()
      const target = yield* createKey(sb.tenantId, ["users:read"], "target")
      const reader = yield* createKey(sb.tenantId, ["keys:read", "users:read"], "reader")
      const narrow = yield* createKey(sb.tenantId, ["keys:revoke", "users:read"], "narrow")
      const keyRows = sql`SELECT id, expires_at, revoked_at FROM api_keys WHERE tenant_id = ${sb.tenantId} ORDER BY id`.pipe(
        Effect.orDie
      )
      const before = yield* keyRows

      expectError(yield* rotate(sb.P, reader.secret, target.id), 403, "permission_error", "missing_scope")
      // The management ceiling: the manager key holds scopes the narrow key lacks.
      expectError(yield* rotate(sb.P, narrow.secret, sb.managerId), 403, "permission_error", "outside_management_ceiling")
      expectError(yield* rotate(sb.P, sb.manager, "key_missing"), 404, "not_found", "resource_missing")
      const other = yield* provisionSandbox(ALL_MANAGEMENT_SCOPES, "Other")
      expectError(yield* rotate(other.P, other.key, target.id), 404, "not_found", "resource_missing")
      for (
        const [body, code, param] of [
          [{ grace_seconds: -1 }, "parameter_invalid", "grace_seconds"],
          [{ grace_seconds: 86_401 }, "parameter_invalid", "grace_seconds"],
          [{ grace_seconds: 1.5 }, "parameter_invalid", "grace_seconds"],
          [{ grace_seconds: "60" }, "parameter_invalid", "grace_seconds"],
          [{ grace: 60 }, "unknown_parameter", "grace"]
        ] as const
      ) {
        expectError(yield* rotate(sb.P, sb.manager, target.id, body), 400, "invalid_request", code, param)
      }
      // The body is a JSON object (`{}` for the default grace), as for every operation with a body.
      expectError(
        yield* request("POST", `${sb.P}/api-keys/${target.id}/rotate`, { key: sb.manager }),
        400,
        "invalid_request",
        "parameter_invalid"
      )
      expectError(
        yield* request("POST", `${sb.P}/api-keys/${target.id}/rotate`, { key: sb.manager, body: {}, idempotencyKey: false }),
        400,
        "invalid_request",
        "idempotency_key_required"
      )
      expect(yield* keyRows).toEqual(before)

      // The largest grace and the default (3,600 s) are accepted; a revoked key is 409.
      const a = expectSingle(yield* rotate(sb.P, narrow.secret, target.id, { grace_seconds: 86_400 }), 201)
      const aOld = expectSingle(yield* request("GET", `${sb.P}/api-keys/${target.id}`, { key: sb.manager }))
      expect(Date.parse(aOld.expires_at) - Date.parse(a.created_at)).toBe(86_400_000)
      const b = expectSingle(yield* rotate(sb.P, sb.manager, a.id), 201)
      const bOld = expectSingle(yield* request("GET", `${sb.P}/api-keys/${a.id}`, { key: sb.manager }))
      expect(Date.parse(bOld.expires_at) - Date.parse(b.created_at)).toBe(3_600_000)
      expectSingle(yield* request("POST", `${sb.P}/api-keys/${b.id}/revoke`, { key: sb.manager }))
      expectError(yield* rotate(sb.P, sb.manager, b.id), 409, "conflict", "key_not_active")

      // The served document: scope, 201 with the secret, the body's bounds, the 409s described.
      const doc = (yield* request("GET", "/v1/openapi.json")).body
      const op = doc.paths["/v1/tenants/{tenant_id}/environments/{environment}/api-keys/{key_id}/rotate"].post
      expect(op).toMatchObject({ operationId: "rotateApiKey", summary: "Rotate an API key", security: [{ ServiceKey: ["keys:revoke"] }] })
      expect(op.responses["201"].content["application/json"].schema).toBeDefined()
      const body = op.requestBody.content["application/json"].schema
      expect(body.additionalProperties).toBe(false)
      expect(body.properties.grace_seconds).toMatchObject({ minimum: 0, maximum: 86_400, default: 3600 })
      for (const code of ["key_not_active", "key_already_rotated", "key_expired"]) expect(op.description).toContain(code)
      expect(doc.components.schemas.ApiKey.properties.status.enum).toEqual(["active", "revoked", "expired"])
    }).pipe(Effect.provide(makeTestApp())), { timeout: 60_000 })
})
