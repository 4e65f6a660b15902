/**
 * Idempotency (D5, contract parts 4, 7, 8) end to end: the real service on a fresh database over
 * real HTTP, plus the pure helpers of src/Platform/Idempotency.ts.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, TestClock } from "effect"
import { fingerprint, isStored, redactSecrets, validKey } from "../src/Edge/Idempotency.js"
import { canonicalJson } from "../src/Kernel/Json.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request, type Sandbox } from "./support/Client.js"
import { eventually } from "./support/Waiting.js"

const SCOPES = ["users:read", "users:write", "service-actors:read", "service-actors:write", "keys:read", "keys:revoke"]

const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

const replayed = (r: Reply) => r.headers.get("idempotent-replayed")

/** Asserts `r` is the same response as `original`, served again from the store. */
const expectReplayOf = (r: Reply, original: Reply) => {
  expect(r.status).toBe(original.status)
  expect(r.text).toBe(original.text) // byte-identical, original request_id included
  expect(replayed(r)).toBe("true")
  expect(r.headers.get("x-request-id")).toBe(original.headers.get("x-request-id"))
  expect(r.headers.get("location")).toBe(original.headers.get("location"))
  expect(r.headers.get("content-type")).toMatch(/^application\/json/)
  expect(r.headers.get("cache-control")).toBe("no-store")
}

const expectError = (r: Reply, status: number, code: string) => {
  expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status, code })
  expect(r.body.request_id).toBe(r.headers.get("x-request-id"))
  expect(replayed(r)).toBeNull()
}

const idemRows = (where: { tenantId?: string; key?: string } = {}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{
      actor: string
      method: string
      path: string
      key: string
      state: string
      status: number | null
      body: string | null
      headers: Record<string, string> | null
      locked_until: Date | null
    }>`SELECT actor, method, path, key, state, status, body, headers, locked_until FROM idempotency_keys
       WHERE (${where.tenantId ?? null}::text IS NULL OR tenant_id = ${where.tenantId ?? null})
         AND (${where.key ?? null}::text IS NULL OR key = ${where.key ?? null})`.pipe(Effect.orDie))

/** Rows of the tenant; service actors without the quickstart's (made at provisioning). */
const count = (table: "users" | "service_actors" | "deletion_jobs", tenantId: string, extra?: { column: string; value: string }) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)} WHERE tenant_id = ${tenantId}
                       ${table === "service_actors" ? sql`AND id NOT IN (SELECT service_actor_id FROM quickstarts)` : sql``}
                       ${extra ? sql`AND ${sql(extra.column)} = ${extra.value}` : sql``}`.pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.orDie
    ))

const sandbox = (organization = "Acme") => provisionSandbox(SCOPES, organization)

const createUser = (sb: Sandbox, body: unknown, idempotencyKey?: string | false) =>
  request("POST", `${sb.P}/users`, { key: sb.key, body, ...(idempotencyKey !== undefined ? { idempotencyKey } : {}) })

// ------------------------------------------------------------------------------------------------

describe("Idempotency helpers", () => {
  it("validKey: 1..255 characters of 0x21..0x7E", () => {
    expect(validKey("a")).toBe(true)
    expect(validKey("!~")).toBe(true)
    expect(validKey("x".repeat(255))).toBe(true)
    expect(validKey("")).toBe(false)
    expect(validKey("x".repeat(256))).toBe(false)
    expect(validKey("has space")).toBe(false)
    expect(validKey("tab\there")).toBe(false)
    expect(validKey("del\x7f")).toBe(false)
    expect(validKey("é")).toBe(false)
  })

  it("canonicalJson sorts keys at every depth and drops no array elements", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe(
      `{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}`
    )
    expect(canonicalJson([{ b: 1, a: 2 }, "s"])).toBe(`[{"a":2,"b":1},"s"]`)
  })

  it("fingerprint: key order and whitespace do not count; method, path and values do", () => {
    const a = fingerprint("POST", "/v1/x", `{"a":1,"b":{"c":2,"d":3}}`)
    expect(fingerprint("POST", "/v1/x", ` { "b" : { "d":3, "c":2 }, "a" : 1 } `)).toBe(a)
    expect(fingerprint("POST", "/v1/x", `{"a":1,"b":{"c":2,"d":4}}`)).not.toBe(a)
    expect(fingerprint("PATCH", "/v1/x", `{"a":1,"b":{"c":2,"d":3}}`)).not.toBe(a)
    expect(fingerprint("POST", "/v1/y", `{"a":1,"b":{"c":2,"d":3}}`)).not.toBe(a)
    // an empty body and a non-JSON body are fingerprinted as they are
    expect(fingerprint("POST", "/v1/x", "")).not.toBe(fingerprint("POST", "/v1/x", "{}"))
    expect(fingerprint("POST", "/v1/x", "not json")).toBe(fingerprint("POST", "/v1/x", "not json"))
  })

  it("isStored: 2xx, 404, 409, 410 are kept; 400, 401, 403, 429, 500, 503 are released", () => {
    for (const s of [200, 201, 202, 404, 409, 410]) expect([s, isStored(s)]).toEqual([s, true])
    for (const s of [400, 401, 403, 429, 500, 503]) expect([s, isStored(s)]).toEqual([s, false])
  })

  it("redactSecrets: every string `secret` becomes null, at any depth; the rest is untouched", () => {
    const original = {
      data: { id: "key_1", secret: "sk_live_abc", scopes: ["a"], nested: { secret: "whsec_x", name: "n" } },
      items: [{ secret: "one", id: 1 }, { id: 2 }, "secret"],
      request_id: "req_1",
      not_secret: "visible"
    }
    const copy = JSON.parse(JSON.stringify(original))
    expect(redactSecrets(original)).toEqual({
      data: { id: "key_1", secret: null, scopes: ["a"], nested: { secret: null, name: "n" } },
      items: [{ secret: null, id: 1 }, { id: 2 }, "secret"],
      request_id: "req_1",
      not_secret: "visible"
    })
    expect(original).toEqual(copy) // not mutated
    expect(redactSecrets({ secret: null })).toEqual({ secret: null })
    expect(redactSecrets("secret")).toBe("secret")
    expect(JSON.stringify(redactSecrets({ data: { secret: "s" } }))).not.toContain(`"s"`)
  })
})

// ------------------------------------------------------------------------------------------------

describe("Idempotency over HTTP: replay", () => {
  it.live("same key and payload: the 201 again, byte-identical, with Idempotent-Replayed; the user exists once", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const payload = { external_id: "ext-1", display_name: "Ada", email: "ada@example.com" }
      const first = yield* createUser(sb, payload, "k-create-1")
      expect(first.status).toBe(201)
      expect(replayed(first)).toBeNull()
      expect(first.body.request_id).toBe(first.headers.get("x-request-id"))

      const second = yield* createUser(sb, payload, "k-create-1")
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
        state: "completed",
        status: 201,
        locked_until: null
      })
      expect(row!.body).toBe(JSON.stringify(redactSecrets(JSON.parse(first.text))))
      expect(row!.body).toBe(first.text)
      expect(row!.headers).toEqual({ "x-request-id": first.headers.get("x-request-id") })
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a 202 replays with the same Location; the deletion is queued once", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const user = yield* createUser(sb, { external_id: "to-delete", display_name: "Del" })
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
      expectError(fresh, 410, "tombstoned")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a PATCH (200) replays and the update is not applied twice", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const user = yield* createUser(sb, { external_id: "patch-me", display_name: "Before" })
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
      expect((yield* createUser(sb, { external_id: "dup", display_name: "One" })).status).toBe(201)

      const conflict = yield* createUser(sb, { external_id: "dup", display_name: "Two" }, "k-dup")
      expectError(conflict, 409, "already_exists")
      expect(conflict.body.error.type).toBe("conflict")
      const conflictAgain = yield* createUser(sb, { external_id: "dup", display_name: "Two" }, "k-dup")
      expectReplayOf(conflictAgain, conflict)

      const missing = yield* request("DELETE", `${sb.P}/users/user_missing`, { key: sb.key, idempotencyKey: "k-404" })
      expectError(missing, 404, "resource_missing")
      const missingAgain = yield* request("DELETE", `${sb.P}/users/user_missing`, { key: sb.key, idempotencyKey: "k-404" })
      expectReplayOf(missingAgain, missing)

      const rows = yield* idemRows({ tenantId: sb.tenantId })
      expect(rows.filter((r) => r.key === "k-dup" || r.key === "k-404").map((r) => [r.key, r.status, r.state]).sort()).toEqual([
        ["k-404", 404, "completed"],
        ["k-dup", 409, "completed"]
      ])
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: conflicts", () => {
  it.live("a changed payload with the same key is 409 idempotency_key_reused; key order and whitespace are no change", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const first = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        rawBody: `{"external_id":"ord","display_name":"Ord","email":"o@example.com"}`,
        idempotencyKey: "k-order"
      })
      expect(first.status).toBe(201)
      const reordered = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        rawBody: ` { "email" : "o@example.com",\n "display_name":"Ord", "external_id":"ord" } `,
        idempotencyKey: "k-order"
      })
      expectReplayOf(reordered, first)

      for (const changed of [
        { external_id: "ord", display_name: "Changed", email: "o@example.com" },
        { external_id: "ord", display_name: "Ord" }, // a field left out
        { external_id: "ord", display_name: "Ord", email: "o@example.com", extra: 1 }
      ]) {
        const r = yield* createUser(sb, changed, "k-order")
        expectError(r, 409, "idempotency_key_reused")
        expect(r.body.error.type).toBe("conflict")
      }
      // the stored response is unchanged and still replays
      expectReplayOf(yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        rawBody: `{"external_id":"ord","display_name":"Ord","email":"o@example.com"}`,
        idempotencyKey: "k-order"
      }), first)
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("while the original is in flight: 409 idempotency_key_in_use; a stale reservation is taken over", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const sql = yield* SqlClient.SqlClient
      const path = `${sb.P}/users`
      const body = JSON.stringify({ external_id: "inflight", display_name: "In Flight" })
      const reserve = (key: string, lockedUntil: Date) =>
        sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint, state,
                                          locked_until, created_at, expires_at)
            VALUES (${sb.tenantId}, 'sandbox', ${`api_key:${sb.keyId}`}, 'POST', ${path}, ${key},
                    ${fingerprint("POST", path, body)}, 'in_flight', ${lockedUntil}, ${new Date()},
                    ${new Date(Date.now() + 7 * 86_400_000)})`.pipe(Effect.orDie)
      const send = (key: string, raw = body) => request("POST", path, { key: sb.key, rawBody: raw, idempotencyKey: key })

      yield* reserve("k-busy", new Date(Date.now() + 60_000))
      expectError(yield* send("k-busy"), 409, "idempotency_key_in_use")
      expectError(yield* send("k-busy"), 409, "idempotency_key_in_use")
      // a different payload under a held key is still "reused", not "in use"
      expectError(
        yield* send("k-busy", JSON.stringify({ external_id: "inflight", display_name: "Other" })),
        409,
        "idempotency_key_reused"
      )
      expect(yield* count("users", sb.tenantId)).toBe(0)
      // the reservation itself is left alone
      expect((yield* idemRows({ tenantId: sb.tenantId, key: "k-busy" }))[0]!.state).toBe("in_flight")

      // the holder died: once its lock has passed, the next request takes the reservation over
      yield* reserve("k-stale", new Date(Date.now() - 1_000))
      const taken = yield* send("k-stale")
      expect(taken.status).toBe(201)
      expect(replayed(taken)).toBeNull()
      const [row] = yield* idemRows({ tenantId: sb.tenantId, key: "k-stale" })
      expect(row).toMatchObject({ state: "completed", status: 201, locked_until: null })
      expectReplayOf(yield* send("k-stale"), taken)
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a stale lock written by Postgres itself (microsecond precision) is taken over too", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const sql = yield* SqlClient.SqlClient
      const path = `${sb.P}/service-actors`
      const body = JSON.stringify({ name: "stale-us" })
      // e.g. an operator releasing stuck reservations with `SET locked_until = now()`
      yield* sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint, state,
                                               locked_until, created_at, expires_at)
                 VALUES (${sb.tenantId}, 'sandbox', ${`api_key:${sb.keyId}`}, 'POST', ${path}, 'k-us',
                         ${fingerprint("POST", path, body)}, 'in_flight',
                         now() - interval '90 seconds' + interval '123 microseconds',
                         now() - interval '3 minutes', now() + interval '7 days')`.pipe(Effect.orDie)
      const r = yield* request("POST", path, { key: sb.key, rawBody: body, idempotencyKey: "k-us" })
      expect(r.status).toBe(201)
      expect(replayed(r)).toBeNull()
      expect(yield* count("service_actors", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("20 identical concurrent requests: one execution; every answer is that 201 or 409 in_use", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const payload = { external_id: "race", display_name: "Race" }
      const replies = yield* Effect.all(
        Array.from({ length: 20 }, () => createUser(sb, payload, "k-race")),
        { concurrency: "unbounded" }
      )
      const created = replies.filter((r) => r.status === 201)
      const busy = replies.filter((r) => r.status === 409)
      expect(created.length + busy.length).toBe(20)
      expect(created.length).toBeGreaterThanOrEqual(1)
      for (const r of busy) expectError(r, 409, "idempotency_key_in_use")
      const originals = created.filter((r) => replayed(r) === null)
      expect(originals.length).toBe(1)
      for (const r of created) expect(r.text).toBe(originals[0]!.text)
      for (const r of created.filter((r) => replayed(r) !== null)) expectReplayOf(r, originals[0]!)
      expect(yield* count("users", sb.tenantId)).toBe(1)

      // and afterwards, everyone gets the replay
      expectReplayOf(yield* createUser(sb, payload, "k-race"), originals[0]!)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a run admitted by a request that died before storing its response is the answer to the retry, not a second run", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const sql = yield* SqlClient.SqlClient
      const qs = (yield* operator("GET", `/tenants/${sb.tenantId}/environments/sandbox/quickstart`)).body
      const conv = (yield* request("POST", `${sb.P}/conversations`, { key: sb.key, body: { workspace_id: qs.workspace_id, agent_revision_id: qs.agent_revision_id } })).body.data
      const post = (idempotencyKey: string) =>
        request("POST", `${sb.P}/conversations/${conv.id}/runs`, { key: sb.key, idempotencyKey, body: { input: [{ type: "text", text: "hi" }] } })
      const first = yield* post("k-run")
      expect(first.status, first.text).toBe(202)
      const done = yield* eventually(
        Effect.map(request("GET", `${sb.P}/runs/${first.body.data.id}`, { key: sb.key }), (r) => r.body.data),
        (r) => r.status === "succeeded"
      )
      expect(done.status).toBe("succeeded")
      // the holder died after admitting the run and before storing its response
      yield* sql`UPDATE idempotency_keys SET state = 'in_flight', locked_until = now() - interval '1 second',
                   status = NULL, headers = NULL, body = NULL
                 WHERE tenant_id = ${sb.tenantId} AND key = 'k-run'`.pipe(Effect.orDie)
      const retried = yield* post("k-run")
      expect(retried.status, retried.text).toBe(202)
      expect(replayed(retried)).toBeNull()
      expect(retried.body.data).toMatchObject({ id: first.body.data.id, status: "succeeded" })
      expect(retried.headers.get("location")).toBe(first.headers.get("location"))
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "k-run" })).toMatchObject([{ state: "completed", status: 202 }])
      // the conversation is free: another key admits another run (so the retry above could have)
      const other = yield* post("k-run-2")
      expect(other.status, other.text).toBe(202)
      expect(other.body.data.id).not.toBe(first.body.data.id)
      const [runs] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM runs WHERE conversation_id = ${conv.id}`.pipe(Effect.orDie)
      expect(runs!.n).toBe(2)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: scope", () => {
  it.live("the same key under another actor, tenant, method or path executes independently", () =>
    Effect.gen(function*() {
      const a = yield* sandbox("Alpha")
      const other = yield* createKey(a.tenantId, SCOPES, "second key")
      const b = yield* sandbox("Beta")
      const K = "shared-key"
      const sa = (key: string, sb: Sandbox) =>
        request("POST", `${sb.P}/service-actors`, { key, body: { name: "svc" }, idempotencyKey: K })

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

describe("Idempotency over HTTP: not stored", () => {
  it.live("400 validation failures are not stored: the same key with a valid body executes", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const invalid = yield* createUser(sb, { external_id: "v1" }, "k-400")
      expectError(invalid, 400, "parameter_missing")
      const unreadable = yield* request("POST", `${sb.P}/users`, { key: sb.key, rawBody: "{not json", idempotencyKey: "k-400" })
      expect(unreadable.status).toBe(400)
      expect(yield* idemRows({ tenantId: sb.tenantId })).toEqual([])

      const valid = yield* createUser(sb, { external_id: "v1", display_name: "Valid" }, "k-400")
      expect(valid.status).toBe(201)
      expect(replayed(valid)).toBeNull()

      // a handler-level validation failure (400) is released too
      const path = `${sb.P}/users/${valid.body.data.id}`
      const empty = yield* request("PATCH", path, { key: sb.key, body: {}, idempotencyKey: "k-400-patch" })
      expectError(empty, 400, "parameter_missing")
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "k-400-patch" })).toEqual([])
      const patched = yield* request("PATCH", path, { key: sb.key, body: { display_name: "Now" }, idempotencyKey: "k-400-patch" })
      expect(patched.status).toBe(200)
      expect(replayed(patched)).toBeNull()
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("401 and 403 are not stored", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const readOnly = yield* createKey(sb.tenantId, ["users:read"], "read only")
      const body = { external_id: "nope", display_name: "Nope" }

      const unauthenticated = yield* request("POST", `${sb.P}/users`, { key: "sk_not_a_real_key", body, idempotencyKey: "k-auth" })
      expectError(unauthenticated, 401, unauthenticated.body?.error?.code)
      expect(unauthenticated.body.error.type).toBe("authentication_error")
      const noKey = yield* request("POST", `${sb.P}/users`, { body, idempotencyKey: "k-auth" })
      expect(noKey.status).toBe(401)

      const forbidden = yield* request("POST", `${sb.P}/users`, { key: readOnly.secret, body, idempotencyKey: "k-auth" })
      expectError(forbidden, 403, "missing_scope")
      const forbiddenAgain = yield* request("POST", `${sb.P}/users`, { key: readOnly.secret, body, idempotencyKey: "k-auth" })
      expectError(forbiddenAgain, 403, "missing_scope")

      expect(yield* idemRows()).toEqual([])
      // the same key still executes for a key that may
      const ok = yield* createUser(sb, body, "k-auth")
      expect(ok.status).toBe(201)
      expect(replayed(ok)).toBeNull()
    }).pipe(Effect.provide(makeTestApp())))

  it.live("429 is not stored: after the limit refills the same key executes", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      // drain the burst (2) with reads
      let limited: Reply | undefined
      for (let i = 0; i < 6 && limited === undefined; i++) {
        const r = yield* request("GET", `${sb.P}/users`, { key: sb.key })
        if (r.status === 429) limited = r
      }
      expect(limited?.status).toBe(429)
      const body = { external_id: "limited", display_name: "L" }
      const refused = yield* createUser(sb, body, "k-429")
      expectError(refused, 429, "rate_limited")
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      expect(yield* idemRows()).toEqual([])

      yield* realSleep(Number(refused.headers.get("retry-after")) * 1000 + 100)
      const later = yield* createUser(sb, body, "k-429")
      expect(later.status).toBe(201)
      expect(replayed(later)).toBeNull()
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp({ rateLimit: { ratePerSecond: 1, burst: 2 } }))))
})

describe("Idempotency over HTTP: the header", () => {
  it.live("missing on POST, PATCH, DELETE: 400 idempotency_key_required; malformed: 400; 255 printable chars: fine", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const body = { external_id: "hdr", display_name: "H" }
      const missing = yield* createUser(sb, body, false)
      expectError(missing, 400, "idempotency_key_required")
      expect(missing.body.error.param).toBe("Idempotency-Key")
      expectError(yield* request("PATCH", `${sb.P}/users/user_x`, { key: sb.key, body: { display_name: "x" }, idempotencyKey: false }), 400, "idempotency_key_required")
      expectError(yield* request("DELETE", `${sb.P}/users/user_x`, { key: sb.key, idempotencyKey: false }), 400, "idempotency_key_required")
      expectError(yield* request("POST", `${sb.P}/api-keys/${sb.keyId}/revoke`, { key: sb.key, idempotencyKey: false }), 400, "idempotency_key_required")

      for (const bad of ["has space", "x".repeat(256), "", "tab\there"]) {
        const r = yield* createUser(sb, body, bad)
        expect([bad.length, r.status, r.body?.error?.type]).toEqual([bad.length, 400, "invalid_request"])
        expect(r.body.error.param).toBe("Idempotency-Key")
      }
      expect(yield* idemRows()).toEqual([])
      expect(yield* count("users", sb.tenantId)).toBe(0)

      const longest = Array.from({ length: 255 }, (_, i) => String.fromCharCode(0x21 + (i % 94))).join("")
      expect(validKey(longest)).toBe(true)
      const ok = yield* createUser(sb, body, longest)
      expect(ok.status).toBe(201)
      expectReplayOf(yield* createUser(sb, body, longest), ok)
      // reads need none
      expect((yield* request("GET", `${sb.P}/users`, { key: sb.key })).status).toBe(200)
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: client disconnects", () => {
  it.live("a request whose client went away still completes once; the retry replays it", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const app = yield* TestApp
      const sql = yield* SqlClient.SqlClient
      // A slow INSERT that a query cancel cannot stop: the write commits even though the caller
      // is interrupted, which is what a cancel racing a commit looks like.
      yield* sql.unsafe(`
        CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.name = 'slow' THEN
            BEGIN
              PERFORM pg_sleep(1);
            EXCEPTION WHEN query_canceled THEN
              NULL;
            END;
          END IF;
          RETURN NEW;
        END $$`).pipe(Effect.orDie)
      yield* sql.unsafe(`CREATE TRIGGER test_slow BEFORE INSERT ON service_actors
                         FOR EACH ROW EXECUTE FUNCTION test_slow_insert()`).pipe(Effect.orDie)
      const sleeping = Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                           WHERE datname = current_database() AND wait_event = 'PgSleep'`.pipe(Effect.orDie),
        (rows) => rows[0]!.n
      )

      const controller = new AbortController()
      const call = yield* Effect.fork(Effect.promise(() =>
        fetch(`${app.baseUrl}${sb.P}/service-actors`, {
          method: "POST",
          headers: { authorization: `Bearer ${sb.key}`, "content-type": "application/json", "idempotency-key": "k-gone" },
          body: JSON.stringify({ name: "slow" }),
          signal: controller.signal
        }).then(() => "answered" as const, () => "aborted" as const)
      ))
      for (let i = 0; i < 100 && (yield* sleeping) === 0; i++) yield* realSleep(20)
      expect(yield* sleeping).toBe(1)
      controller.abort()
      expect(yield* Fiber.join(call)).toBe("aborted")

      // retry like a client would, until the original is no longer in flight
      let retry: Reply | undefined
      for (let i = 0; i < 100; i++) {
        yield* realSleep(50)
        retry = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "slow" }, idempotencyKey: "k-gone" })
        if (!(retry.status === 409 && retry.body?.error?.code === "idempotency_key_in_use")) break
      }
      // give a (wrong) second execution time to commit before counting
      for (let i = 0; i < 100 && (yield* sleeping) > 0; i++) yield* realSleep(20)
      expect(yield* count("service_actors", sb.tenantId, { column: "name", value: "slow" })).toBe(1)
      expect(retry!.status).toBe(201)
      expect(replayed(retry!)).toBe("true")
    }).pipe(Effect.provide(makeTestApp())))
})

describe("Idempotency over HTTP: long requests", () => {
  it.live("a request that outlives the lock time keeps its reservation: a retry meanwhile is 409 in_use, never a second execution", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`
        CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.name = 'slow' THEN PERFORM pg_sleep(2.5); END IF;
          RETURN NEW;
        END $$`).pipe(Effect.orDie)
      yield* sql.unsafe(`CREATE TRIGGER test_slow BEFORE INSERT ON service_actors
                         FOR EACH ROW EXECUTE FUNCTION test_slow_insert()`).pipe(Effect.orDie)
      const send = request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "slow" }, idempotencyKey: "k-long" })
      const original = yield* Effect.fork(send)
      // the lock is 1 s: without its extension a retry after 1.5 s would take the reservation over
      yield* realSleep(1500)
      const mid = yield* send
      expectError(mid, 409, "idempotency_key_in_use")
      const first = yield* Fiber.join(original)
      expect(first.status).toBe(201)
      expectReplayOf(yield* send, first)
      expect(yield* count("service_actors", sb.tenantId, { column: "name", value: "slow" })).toBe(1)
    }).pipe(Effect.provide(makeTestApp({ idempotencyLockSeconds: 1 }))))
})

describe("Idempotency: the 7-day replay window (TestClock)", () => {
  const DAY = 86_400
  // Long background intervals keep TestClock.adjust over days to a few hundred wake-ups.
  const quiet = { cellIdleTimeoutSeconds: 30 * DAY }

  it.effect("replays until 7 days have passed, then the same key and payload execute anew", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sb = yield* sandbox()
        const send = request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "nightly" }, idempotencyKey: "k-week" })
        const first = yield* send
        expect(first.status).toBe(201)

        yield* TestClock.adjust("6 days")
        expectReplayOf(yield* send, first)
        yield* TestClock.adjust(`${DAY - 1} seconds`) // 1 s before the window closes
        expectReplayOf(yield* send, first)
        expect(yield* count("service_actors", sb.tenantId)).toBe(1)

        yield* TestClock.adjust("1 second") // exactly 7 days: outside the window
        const anew = yield* send
        expect(anew.status).toBe(201)
        expect(replayed(anew)).toBeNull()
        expect(anew.body.data.id).not.toBe(first.body.data.id)
        expect(yield* count("service_actors", sb.tenantId)).toBe(2)
        // the new execution starts a new window
        expectReplayOf(yield* send, anew)
      }).pipe(Effect.provide(makeTestApp({ ...quiet, sweepIntervalSeconds: 30 * DAY })))
    }))

  it.effect("the background sweep deletes records once they are past the window, and only those", () =>
    Effect.gen(function*() {
      const t0 = Date.now()
      yield* TestClock.setTime(t0)
      // An hourly sweep: the 7 days of TestClock below stay a few hundred wake-ups (the default 60 s
      // would be ~10,000, each a real query).
      const interval = 3600
      yield* Effect.gen(function*() {
        const sb = yield* sandbox()
        const sql = yield* SqlClient.SqlClient
        const first = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name: "swept" }, idempotencyKey: "k-sweep" })
        expect(first.status).toBe(201)
        // a record that leaves its window after 1 day: shows when a sweep has run
        yield* sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint, state,
                                                 status, headers, body, created_at, expires_at)
                   VALUES (${sb.tenantId}, 'sandbox', ${`api_key:${sb.keyId}`}, 'POST', ${`${sb.P}/service-actors`},
                           'k-canary', 'x', 'completed', 201, '{}'::jsonb, '{}', ${new Date(t0)},
                           ${new Date(t0 + DAY * 1000)})`.pipe(Effect.orDie)
        const keys = Effect.map(idemRows({ tenantId: sb.tenantId }), (rows) => rows.map((r) => r.key).sort())

        /**
         * A sweep runs a real query: it may still be running when TestClock.adjust returns, and
         * only then schedules its next run. Nudge the clock by one interval until `done`.
         */
        const sweepUntil = (done: (keys: ReadonlyArray<string>) => boolean) =>
          Effect.gen(function*() {
            let current = yield* keys
            for (let i = 0; i < 50 && !done(current); i++) {
              yield* TestClock.adjust(`${interval} seconds`)
              yield* realSleep(20)
              current = yield* keys
            }
            return current
          })

        yield* TestClock.setTime(t0 + DAY * 1000)
        expect(yield* sweepUntil((k) => !k.includes("k-canary"))).toEqual(["k-sweep"])

        // 7 days after the request: its record goes too, without any request touching it
        yield* TestClock.setTime(t0 + 7 * DAY * 1000)
        expect(yield* sweepUntil((k) => !k.includes("k-sweep"))).toEqual([])
        const now = yield* TestClock.currentTimeMillis
        expect(now - t0).toBeLessThan(7 * DAY * 1000 + 50 * interval * 1000)
      }).pipe(Effect.provide(makeTestApp({ ...quiet, sweepIntervalSeconds: interval })))
    }))
})
