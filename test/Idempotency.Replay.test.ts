/**
 * Idempotency (D5, contract parts 4, 7, 8) over real HTTP on a fresh database: the same key and
 * payload replay the stored response byte for byte (201, 202 with its Location, 200, stored 409
 * and 404) and execute once; the same key under another actor, tenant, method or path is another
 * request.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { redactSecrets } from "../src/Edge/Idempotency.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request, type Sandbox } from "./support/Client.js"
import { count, expectFreshError, expectReplayOf, IDEMPOTENCY_SCOPES, idemRows, replayed, sandbox } from "./support/Idempotency.js"
import { postUser } from "./support/Sandboxes.js"

describe("Idempotency over HTTP: replay", () => {
  it.live("same key and payload: the 201 again, byte-identical, with Idempotent-Replayed; the user exists once", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const payload = { external_id: "ext-1", display_name: "Ada", email: "ada@example.com" }
      const first = yield* postUser(sb.P, sb.key, payload, "k-create-1")
      expect(first.status).toBe(201)
      expect(replayed(first)).toBeNull()
      expect(first.body.request_id).toBe(first.headers.get("x-request-id"))

      const second = yield* postUser(sb.P, sb.key, payload, "k-create-1")
      expectReplayOf(second, first)
      expect(second.body.request_id).toBe(first.body.request_id)
      // a client-sent request id does not change the replayed body or its X-Request-Id
      const third = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        body: payload,
        idempotencyKey: "k-create-1",
        headers: { "x-request-id": "client-chosen-id" }
      })
      expectReplayOf(third, first)

      expect(yield* count("users", sb.tenantId, { column: "external_id", value: "ext-1" })).toBe(1)
      const list = yield* request("GET", `${sb.P}/users`, { key: sb.key })
      expect(list.body.items.map((u: any) => u.id)).toEqual([first.body.data.id])

      // the stored body is the redacted JSON of the response (here: nothing to redact)
      const [row] = yield* idemRows({ tenantId: sb.tenantId, key: "k-create-1" })
      expect(row).toMatchObject({
        actor: `api_key:${sb.keyId}`,
        method: "POST",
        path: `${sb.P}/users`,
        status: 201
      })
      expect(row!.body).toBe(JSON.stringify(redactSecrets(JSON.parse(first.text))))
      expect(row!.body).toBe(first.text)
      expect(row!.headers).toEqual({ "x-request-id": first.headers.get("x-request-id") })
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a 202 replays with the same Location; the deletion is queued once", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const user = yield* postUser(sb.P, sb.key, { external_id: "to-delete", display_name: "Del" })
      expect(user.status).toBe(201)
      const path = `${sb.P}/users/${user.body.data.id}`

      const first = yield* request("DELETE", path, { key: sb.key, idempotencyKey: "k-del" })
      expect(first.status).toBe(202)
      expect(first.headers.get("location")).toBe(`${sb.P}/deletion-jobs/${first.body.data.id}`)

      const again = yield* request("DELETE", path, { key: sb.key, idempotencyKey: "k-del" })
      expectReplayOf(again, first)
      expect(yield* count("deletion_jobs", sb.tenantId, { column: "resource_id", value: user.body.data.id })).toBe(1)

      // executing it again (another key) would answer differently: the user is gone
      const fresh = yield* request("DELETE", path, { key: sb.key, idempotencyKey: "k-del-2" })
      expectFreshError(fresh, 410, "tombstoned")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a PATCH (200) replays and the update is not applied twice", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const user = yield* postUser(sb.P, sb.key, { external_id: "patch-me", display_name: "Before" })
      const path = `${sb.P}/users/${user.body.data.id}`
      const first = yield* request("PATCH", path, { key: sb.key, body: { display_name: "After" }, idempotencyKey: "k-patch" })
      expect(first.status).toBe(200)
      expect(first.body.data.display_name).toBe("After")
      // someone else changes it meanwhile; the replay is the stored response and changes nothing
      const other = yield* request("PATCH", path, { key: sb.key, body: { display_name: "Other" } })
      expect(other.status).toBe(200)
      const again = yield* request("PATCH", path, { key: sb.key, body: { display_name: "After" }, idempotencyKey: "k-patch" })
      expectReplayOf(again, first)
      const now = yield* request("GET", path, { key: sb.key })
      expect(now.body.data.display_name).toBe("Other")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("stored errors replay: 409 already_exists and 404", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      expect((yield* postUser(sb.P, sb.key, { external_id: "dup", display_name: "One" })).status).toBe(201)

      const conflict = yield* postUser(sb.P, sb.key, { external_id: "dup", display_name: "Two" }, "k-dup")
      expectFreshError(conflict, 409, "already_exists")
      expect(conflict.body.error.type).toBe("conflict")
      const conflictAgain = yield* postUser(sb.P, sb.key, { external_id: "dup", display_name: "Two" }, "k-dup")
      expectReplayOf(conflictAgain, conflict)

      const missing = yield* request("DELETE", `${sb.P}/users/user_missing`, { key: sb.key, idempotencyKey: "k-404" })
      expectFreshError(missing, 404, "resource_missing")
      const missingAgain = yield* request("DELETE", `${sb.P}/users/user_missing`, { key: sb.key, idempotencyKey: "k-404" })
      expectReplayOf(missingAgain, missing)

      const rows = yield* idemRows({ tenantId: sb.tenantId })
      expect(rows.filter((r) => r.key === "k-dup" || r.key === "k-404").map((r) => [r.key, r.status]).sort()).toEqual([
        ["k-404", 404],
        ["k-dup", 409]
      ])
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: scope", () => {
  it.live("the same key under another actor, tenant, method or path executes independently", () =>
    Effect.gen(function*() {
      const a = yield* sandbox("Alpha")
      const other = yield* createKey(a.tenantId, IDEMPOTENCY_SCOPES, "second key")
      const b = yield* sandbox("Beta")
      const K = "shared-key"
      const sa = (key: string, sb: Sandbox) => request("POST", `${sb.P}/service-actors`, { key, body: { name: "svc" }, idempotencyKey: K })

      const first = yield* sa(a.key, a)
      expect(first.status).toBe(201)
      expect(replayed(first)).toBeNull()

      // another actor (a second key of the same tenant)
      const byOtherKey = yield* sa(other.secret, a)
      expect(byOtherKey.status).toBe(201)
      expect(replayed(byOtherKey)).toBeNull()
      expect(byOtherKey.body.data.id).not.toBe(first.body.data.id)

      // another tenant
      const otherTenant = yield* sa(b.key, b)
      expect(otherTenant.status).toBe(201)
      expect(replayed(otherTenant)).toBeNull()

      // another path, same method and key (different payload: would be "reused" if scopes mixed)
      const user = yield* request("POST", `${a.P}/users`, {
        key: a.key,
        body: { external_id: "scoped", display_name: "S" },
        idempotencyKey: K
      })
      expect(user.status).toBe(201)
      expect(replayed(user)).toBeNull()

      // another method, same path and key
      const userPath = `${a.P}/users/${user.body.data.id}`
      const patched = yield* request("PATCH", userPath, { key: a.key, body: { display_name: "P" }, idempotencyKey: "k-m" })
      expect(patched.status).toBe(200)
      const deleted = yield* request("DELETE", userPath, { key: a.key, idempotencyKey: "k-m" })
      expect(deleted.status).toBe(202)
      expect(replayed(deleted)).toBeNull()

      expect(yield* count("service_actors", a.tenantId)).toBe(2)
      expect(yield* count("service_actors", b.tenantId)).toBe(1)
      const rows = yield* idemRows({ key: K })
      expect(rows.map((r) => `${r.actor} ${r.method} ${r.path}`).sort()).toEqual(
        [
          `api_key:${a.keyId} POST ${a.P}/service-actors`,
          `api_key:${other.id} POST ${a.P}/service-actors`,
          `api_key:${b.keyId} POST ${b.P}/service-actors`,
          `api_key:${a.keyId} POST ${a.P}/users`
        ].sort()
      )
    }).pipe(Effect.provide(makeTestApp())))
})
