/**
 * Workspace memory over HTTP (D14): put/get/delete with versions and `if_version` (409
 * `version_conflict`), `updated_by` (the key, or the user of an actor token), values of exactly
 * 64 KiB accepted and one byte more refused (400 `value_too_large`), keys by their pattern (400
 * naming `key`), lists in key order with a prefix and D6 cursors, another tenant's workspace and
 * keys answered as missing ones, and the scopes `memory:read` / `memory:write`. Values count
 * toward the `storage_bytes` quota (D20): a write past it is 429 and stores nothing.
 */
import { describe, expect, it as unit, layer } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { exportJWK, generateKeyPair, SignJWT } from "jose"
import { valueProblem } from "../src/Domain/Memory.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle, keysOf } from "./support/Envelopes.js"
import { sandboxWithKey } from "./support/Sandboxes.js"

const MEMORY_SCOPES = [
  "agents:read",
  "agents:write",
  "memory:read",
  "memory:write",
  "users:write",
  "settings:write",
  "actor-sessions:write"
]
const ITEM_FIELDS = ["key", "object", "updated_at", "updated_by", "value", "version"]

/** A sandbox with a memory key and a workspace, and calls on its memory. */
const memorySandbox = (organization = "Acme") =>
  Effect.gen(function*() {
    const sb = yield* sandboxWithKey(MEMORY_SCOPES, "memory", organization)
    const ws = expectSingle(yield* request("POST", `${sb.P}/workspaces`, { key: sb.manager, body: { name: "Support" } }), 201)
    const memory = (workspaceId = ws.id) => `${sb.P}/workspaces/${workspaceId}/memory`
    const call = (
      method: string,
      path: string,
      options: { body?: unknown; key?: string; idempotencyKey?: string; headers?: Record<string, string> } = {}
    ) => request(method, `${memory()}${path}`, { key: sb.manager, ...options })
    const put = (key: string, body: unknown, options: { idempotencyKey?: string; headers?: Record<string, string> } = {}) =>
      call("PUT", `/${key}`, { body, ...options })
    return { ...sb, ws, memory, call, put }
  })

layer(makeTestApp(), { excludeTestServices: true, timeout: "60 seconds" })("workspace memory (D14)", (it) => {
  it.effect("put, get, versions, if_version conflicts, delete; an idempotent replay writes nothing", () =>
    Effect.gen(function*() {
      const s = yield* memorySandbox()
      const first = expectSingle(yield* s.put("notes:greeting", { value: { text: "hi", n: [1, 2] } }, { idempotencyKey: "put-1" }))
      expect(keysOf(first)).toEqual(ITEM_FIELDS)
      expect(first).toMatchObject({
        object: "memory_item",
        key: "notes:greeting",
        value: { text: "hi", n: [1, 2] },
        version: 1,
        updated_by: { type: "api_key", id: s.managerId }
      })
      expect(expectSingle(yield* s.call("GET", "/notes:greeting"))).toEqual(first)
      // the same Idempotency-Key replays the first answer and writes nothing
      const replay = yield* s.put("notes:greeting", { value: { text: "hi", n: [1, 2] } }, { idempotencyKey: "put-1" })
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
      expect(expectSingle(yield* s.call("GET", "/notes:greeting")).version).toBe(1)

      expect(expectSingle(yield* s.put("notes:greeting", { value: "second" })).version).toBe(2)
      // stale: nothing written
      const stale = yield* s.put("notes:greeting", { value: "stale", if_version: 1 })
      expectError(stale, 409, "conflict", "version_conflict")
      expect(expectSingle(yield* s.call("GET", "/notes:greeting"))).toMatchObject({ value: "second", version: 2 })
      expect(expectSingle(yield* s.put("notes:greeting", { value: null, if_version: 2 }))).toMatchObject({ value: null, version: 3 })
      // if_version 0: only a key that does not exist; another version of a missing key is a conflict
      expectErrorCode(yield* s.put("notes:greeting", { value: 1, if_version: 0 }), 409, "version_conflict")
      expect(expectSingle(yield* s.put("fresh", { value: 1, if_version: 0 })).version).toBe(1)
      expectErrorCode(yield* s.put("absent", { value: 1, if_version: 4 }), 409, "version_conflict")
      expectError(yield* s.call("GET", "/absent"), 404, "not_found", "resource_missing", "key")

      const deleted = expectSingle(yield* s.call("DELETE", "/notes:greeting"))
      expect(deleted).toEqual({ object: "memory_item", key: "notes:greeting", deleted: true })
      expectError(yield* s.call("GET", "/notes:greeting"), 404, "not_found", "resource_missing", "key")
      expectError(yield* s.call("DELETE", "/notes:greeting"), 404, "not_found", "resource_missing", "key")
      // a deleted key starts again at version 1
      expect(expectSingle(yield* s.put("notes:greeting", { value: "again" })).version).toBe(1)
    }))

  it.effect("updated_by is the user of an X-Actor-Token", () =>
    Effect.gen(function*() {
      const s = yield* memorySandbox()
      const idp = yield* Effect.promise(() => generateKeyPair("ES256"))
      const jwk = { ...(yield* Effect.promise(() => exportJWK(idp.publicKey))), kid: "idp-1", alg: "ES256" }
      const settings = { identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: { keys: [jwk] } } }
      expectSingle(yield* request("PATCH", `${s.P}/settings`, { key: s.manager, body: settings }))
      const user = expectSingle(
        yield* request("POST", `${s.P}/users`, { key: s.manager, body: { external_id: "u-1", display_name: "Ada" } }),
        201
      )
      const iat = Math.floor((yield* Clock.currentTimeMillis) / 1000)
      const assertion = yield* Effect.promise(() =>
        new SignJWT({ iss: "https://idp.acme.test", aud: "agent-platform", sub: "u-1", iat, exp: iat + 120, jti: "jti-memory" })
          .setProtectedHeader({ alg: "ES256", kid: "idp-1" }).sign(idp.privateKey)
      )
      const session = expectSingle(
        yield* request("POST", `${s.P}/actor-sessions`, { key: s.manager, body: { user_id: user.id, assertion } }),
        201
      )
      const item = expectSingle(yield* s.put("prefs", { value: { tone: "formal" } }, { headers: { "x-actor-token": session.token } }))
      expect(item.updated_by).toEqual({ type: "user", id: user.id })
      expectErrorCode(yield* s.put("prefs", { value: 1 }, { headers: { "x-actor-token": "act_forged" } }), 403, "actor_token_invalid")
    }))

  it.effect("a value of exactly 64 KiB is accepted, one byte more is 400 value_too_large; keys and bodies are checked", () =>
    Effect.gen(function*() {
      const s = yield* memorySandbox()
      // JSON.stringify of a string adds its two quotes: 65,534 characters are 65,536 bytes
      const exact = "x".repeat(64 * 1024 - 2)
      expect(expectSingle(yield* s.put("big", { value: exact })).value).toBe(exact)
      expectError(yield* s.put("big", { value: exact + "x" }), 400, "invalid_request", "value_too_large", "value")
      // bytes, not characters: "é" is two bytes of UTF-8
      expectError(yield* s.put("big", { value: "é".repeat(32 * 1024) }), 400, "invalid_request", "value_too_large", "value")
      expect(expectSingle(yield* s.call("GET", "/big")).version).toBe(1)

      for (const bad of ["a%2Fb", "has%20space", "%C3%A9t%C3%A9", "k".repeat(129)]) {
        expectError(yield* s.put(bad, { value: 1 }), 400, "invalid_request", "parameter_invalid", "key")
        expectError(yield* s.call("GET", `/${bad}`), 400, "invalid_request", "parameter_invalid", "key")
      }
      expect(expectSingle(yield* s.put("k".repeat(128), { value: 1 })).key).toHaveLength(128)
      expectError(yield* s.call("GET", "?prefix=a%2F"), 400, "invalid_request", "parameter_invalid", "prefix")
      expectError(yield* s.put("k", {}), 400, "invalid_request", "parameter_missing", "value")
      expectError(yield* s.put("k", { value: 1, extra: true }), 400, "invalid_request", "unknown_parameter", "extra")
      expectError(yield* s.put("k", { value: 1, if_version: -1 }), 400, "invalid_request", "parameter_invalid", "if_version")
    }))

  it.effect("lists in key order, with a prefix and D6 cursors", () =>
    Effect.gen(function*() {
      const s = yield* memorySandbox()
      for (const key of ["b:1", "a:3", "a:10", "a", "a:2", "a:", "a:1", "A:1"]) expectSingle(yield* s.put(key, { value: key }))
      const keys = (page: { items: Array<any> }) => page.items.map((i) => i.key)
      const all = expectList(yield* s.call("GET", ""))
      expect(keys(all)).toEqual(["A:1", "a", "a:", "a:1", "a:10", "a:2", "a:3", "b:1"])
      expect(all.next_cursor).toBeNull()
      expect(keysOf(all.items[0])).toEqual(ITEM_FIELDS)

      const pages: Array<Array<string>> = []
      let cursor: string | null = ""
      while (cursor !== null) {
        const page = expectList(yield* s.call("GET", `?prefix=a:&limit=2&cursor=${cursor}`))
        pages.push(keys(page))
        cursor = page.next_cursor
        // an insert behind the cursor is not seen, one ahead of it is, once
        if (pages.length === 1) expectSingle(yield* s.put("a:15", { value: "late" }))
      }
      expect(pages).toEqual([["a:", "a:1"], ["a:10", "a:15"], ["a:2", "a:3"]])

      const first = expectList(yield* s.call("GET", "?prefix=a:&limit=1"))
      expectError(
        yield* s.call("GET", `?prefix=b:&cursor=${first.next_cursor}`),
        400,
        "invalid_request",
        "invalid_cursor",
        "cursor"
      )
      expect(keys(expectList(yield* s.call("GET", "?prefix=zz")))).toEqual([])
    }))

  it.effect("values count toward storage_bytes (D20): counted, an overwrite counts the difference, a delete gives them back; past the limit 429, nothing stored", () =>
    Effect.gen(function*() {
      const s = yield* memorySandbox()
      const stored = Effect.map(
        request("GET", `${s.P}/quotas`, { key: s.key }),
        (r) => expectList(r).items.find((q: any) => q.name === "storage_bytes")
      )
      expect((yield* stored).used).toBe(0)
      // the UTF-8 bytes of the JSON as stored: "\"éé\"" is 6, {"a":1} is 7
      expectSingle(yield* s.put("k1", { value: "éé" }))
      expectSingle(yield* s.put("k2", { value: { a: 1 } }))
      expect((yield* stored).used).toBe(13)
      expectSingle(yield* s.put("k1", { value: "x".repeat(98) })) // 100 bytes in place of 6
      expect((yield* stored).used).toBe(107)
      expectSingle(yield* s.put("k1", { value: 1 })) // 1 byte in place of 100
      expect((yield* stored).used).toBe(8)

      expect((yield* operator("PUT", `/tenants/${s.tenantId}/environments/sandbox/quotas/storage_bytes`, { limit: 50 })).status).toBe(200)
      const over = yield* s.put("k3", { value: "y".repeat(41) }, { idempotencyKey: "over-1" }) // 43 bytes: 51 > 50
      expectError(over, 429, "rate_limited", "quota_exceeded")
      expect(over.headers.get("retry-after")).toBe("60")
      expect(over.body.error.message).toContain("storage_bytes")
      expectErrorCode(yield* s.call("GET", "/k3"), 404, "resource_missing")
      // an overwrite that grows past it is refused too, and the stored value stays
      expectErrorCode(yield* s.put("k2", { value: "z".repeat(60) }), 429, "quota_exceeded")
      expect(expectSingle(yield* s.call("GET", "/k2"))).toMatchObject({ value: { a: 1 }, version: 1 })
      expect(yield* stored).toMatchObject({ used: 8, limit: 50 })
      // exactly up to the limit is stored; a shrink or a delete always is
      expectSingle(yield* s.put("k3", { value: "y".repeat(40) }, { idempotencyKey: "fits" })) // 42 bytes: 50
      expect((yield* stored).used).toBe(50)
      expectSingle(yield* s.call("DELETE", "/k2"))
      expect((yield* stored).used).toBe(43)
      // the refused request was not kept: its Idempotency-Key writes once there is room
      expectSingle(yield* s.put("k3", { value: "y".repeat(41) }, { idempotencyKey: "over-1" }))
      expect((yield* stored).used).toBe(44)
      // concurrent writes of one new key, each of another size: what is counted is what stays stored
      expect((yield* operator("PUT", `/tenants/${s.tenantId}/environments/sandbox/quotas/storage_bytes`, { limit: 10_000 })).status)
        .toBe(200)
      const replies = yield* Effect.forEach(
        Array.from({ length: 16 }, (_, i) => i),
        (i) => s.put("race", { value: "r".repeat(i * 10) }),
        { concurrency: "unbounded" }
      )
      expect(replies.every((r) => r.status === 200)).toBe(true)
      const last = expectSingle(yield* s.call("GET", "/race"))
      expect(last.version).toBe(16)
      expect((yield* stored).used).toBe(44 + JSON.stringify(last.value).length)
    }))

  it.effect("another tenant's workspace and keys are 404 with the body of missing ones; scopes are enforced", () =>
    Effect.gen(function*() {
      const a = yield* memorySandbox("Acme")
      const b = yield* memorySandbox("Beta")
      expectSingle(yield* b.put("secret", { value: "b's" }))
      expectSingle(yield* a.put("mine", { value: "a's" }))

      const errorOf = (r: { body: any }) => r.body.error
      const missingWorkspace = (method: string, suffix: string, body?: unknown) =>
        Effect.gen(function*() {
          const foreign = yield* request(method, `${a.memory(b.ws.id)}${suffix}`, { key: a.manager, body })
          const missing = yield* request(method, `${a.memory("ws_0000000000missing00000000")}${suffix}`, { key: a.manager, body })
          expectError(foreign, 404, "not_found", "resource_missing", "workspace_id")
          expect(errorOf(foreign)).toEqual(errorOf(missing))
        })
      yield* missingWorkspace("GET", "")
      yield* missingWorkspace("GET", "/secret")
      yield* missingWorkspace("PUT", "/secret", { value: "overwritten" })
      yield* missingWorkspace("DELETE", "/secret")
      // b's key in a's workspace: as missing as any key
      const foreignKey = yield* a.call("GET", "/secret")
      expectError(foreignKey, 404, "not_found", "resource_missing", "key")
      expect(errorOf(foreignKey)).toEqual(errorOf(yield* a.call("GET", "/never-written")))
      expect(expectSingle(yield* b.call("GET", "/secret"))).toMatchObject({ value: "b's", version: 1 })

      const reader = yield* createKey(a.tenantId, ["memory:read"], "reader")
      const outsider = yield* createKey(a.tenantId, ["agents:read"], "outsider")
      expect(expectSingle(yield* a.call("GET", "/mine", { key: reader.secret })).value).toBe("a's")
      expectErrorCode(yield* a.call("PUT", "/mine", { key: reader.secret, body: { value: 1 } }), 403, "missing_scope")
      expectErrorCode(yield* a.call("DELETE", "/mine", { key: reader.secret }), 403, "missing_scope")
      expectErrorCode(yield* a.call("GET", "/mine", { key: outsider.secret }), 403, "missing_scope")
      expectErrorCode(yield* a.call("GET", "", { key: outsider.secret }), 403, "missing_scope")
      expect(expectSingle(yield* a.call("GET", "/mine")).version).toBe(1)
    }))
})

describe("an agent's value (memory_put)", () => {
  unit("holds what a request body may: no control character but tab, LF and CR, no lone surrogate, 64 levels", () => {
    expect(valueProblem({ a: ["tab\t LF\n CR\r", 1, null, true], "é 👍": "ok" })).toBeUndefined()
    expect(valueProblem({ a: ["ok", "bell\u0007"] })).toBe("value.a.1: holds a control character or a lone surrogate")
    expect(valueProblem({ ["k\u0000"]: 1 })).toBe("value: a key holds a control character or a lone surrogate")
    expect(valueProblem(["\ud800"])).toContain("lone surrogate")
    const nested = (levels: number): unknown => (levels === 1 ? [] : [nested(levels - 1)])
    expect(valueProblem(nested(64))).toBeUndefined()
    expect(valueProblem(nested(65))).toContain("nests deeper than 64 levels")
  })
})
