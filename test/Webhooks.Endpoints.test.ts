/**
 * Webhook endpoints (D18): the secret shown once (null in an idempotent replay, encrypted at rest),
 * rotation shown once too; URLs through the destination guard (400 `destination_refused`, param
 * `url`); event types checked (param `event_types.N`); update, disable, delete; D6 lists; scopes
 * `webhooks:read` / `webhooks:write`; another tenant's endpoint is 404; the document's operations;
 * at most 16 endpoints per environment (D20, quota `webhook_endpoints`).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { WEBHOOK_EVENT_TYPES } from "../src/Domain/Webhooks.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle, keysOf } from "./support/Envelopes.js"
import { RUN_SCOPES } from "./support/Sandboxes.js"
import { settle } from "./support/Waiting.js"
import { startReceiver } from "./support/WebhookReceiver.js"
import { waitFor, webhookSandbox, webhookSettings } from "./support/WebhookSandbox.js"

const ENDPOINT_FIELDS = [
  "created_at",
  "description",
  "enabled",
  "event_types",
  "id",
  "object",
  "previous_secret_expires_at",
  "updated_at",
  "url"
]
const RECEIVER = "http://127.0.0.1:9/hooks"

layer(makeTestApp(webhookSettings()), { excludeTestServices: true, timeout: "60 seconds" })("webhook endpoints (D18)", (it) => {
  it.effect("create shows the secret once: not in reads, null in an idempotent replay, encrypted at rest; rotation likewise", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const s = yield* webhookSandbox()
      const body = { url: RECEIVER, event_types: ["run.succeeded", "run.failed", "run.succeeded"], description: "orders" }
      const created = yield* s.hooks("POST", "/webhook-endpoints", body, "create-endpoint")
      const endpoint = expectSingle(created, 201)
      expect(keysOf(endpoint)).toEqual([...ENDPOINT_FIELDS, "secret"].sort())
      expect(endpoint).toMatchObject({
        object: "webhook_endpoint",
        url: RECEIVER,
        event_types: ["run.succeeded", "run.failed"],
        description: "orders",
        enabled: true,
        previous_secret_expires_at: null
      })
      expect(endpoint.id).toMatch(/^we_/)
      expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
      expect(Buffer.from(endpoint.secret.slice("whsec_".length), "base64")).toHaveLength(32)

      const replayed = yield* s.hooks("POST", "/webhook-endpoints", body, "create-endpoint")
      expect(replayed.status).toBe(201)
      expect(replayed.headers.get("idempotent-replayed")).toBe("true")
      expect(replayed.body.data).toEqual({ ...endpoint, secret: null })

      const read = expectSingle(yield* s.hooks("GET", `/webhook-endpoints/${endpoint.id}`))
      expect(keysOf(read)).toEqual(ENDPOINT_FIELDS)
      expect(read).toEqual({ ...endpoint, secret: undefined })
      const listed = expectList(yield* s.hooks("GET", "/webhook-endpoints")).items
      expect(listed.map((e) => e.id)).toEqual([endpoint.id])
      expect(keysOf(listed[0])).toEqual(ENDPOINT_FIELDS)

      const rotated = expectSingle(yield* s.hooks("POST", `/webhook-endpoints/${endpoint.id}/rotate-secret`, undefined, "rotate-1"))
      expect(rotated.secret).toMatch(/^whsec_/)
      expect(rotated.secret).not.toBe(endpoint.secret)
      expect(rotated.previous_secret_expires_at).not.toBeNull()
      const rotatedAgain = yield* s.hooks("POST", `/webhook-endpoints/${endpoint.id}/rotate-secret`, undefined, "rotate-1")
      expect(rotatedAgain.headers.get("idempotent-replayed")).toBe("true")
      expect(rotatedAgain.body.data.secret).toBeNull()

      // neither secret is stored in the clear, nor kept in a stored response
      const stored = yield* sql<{ text: string }>`
        SELECT row_to_json(e)::text AS text FROM webhook_endpoints e WHERE id = ${endpoint.id}
        UNION ALL SELECT body AS text FROM idempotency_keys`
      for (const secret of [endpoint.secret, rotated.secret]) {
        const bare = secret.slice("whsec_".length)
        for (const row of stored) expect(row.text).not.toContain(bare)
      }
    }))

  it.effect("URLs pass the destination guard: 400 destination_refused naming `url`, on create and update", () =>
    Effect.gen(function*() {
      const s = yield* webhookSandbox()
      for (
        const url of [
          "https://10.0.0.7/hook",
          "https://localhost/hook",
          "https://169.254.169.254/latest",
          "http://example.com/hook",
          "https://[::1]/x"
        ]
      ) {
        expectError(
          yield* s.hooks("POST", "/webhook-endpoints", { url, event_types: ["run.failed"] }),
          400,
          "invalid_request",
          "destination_refused",
          "url"
        )
      }
      const endpoint = yield* s.createEndpoint(RECEIVER, ["run.failed"])
      expectError(
        yield* s.hooks("PATCH", `/webhook-endpoints/${endpoint.id}`, { url: "https://192.168.1.1/hook" }),
        400,
        "invalid_request",
        "destination_refused",
        "url"
      )
      expectError(
        yield* s.hooks("POST", "/webhook-endpoints", { url: "https://hooks.example.com/x#frag", event_types: ["run.failed"] }),
        400,
        "invalid_request",
        "parameter_invalid",
        "url"
      )
      expect(expectSingle(yield* s.hooks("GET", `/webhook-endpoints/${endpoint.id}`)).url).toBe(RECEIVER)
    }))

  it.effect("event types are checked against the list: param event_types.N", () =>
    Effect.gen(function*() {
      const s = yield* webhookSandbox()
      const post = (event_types: unknown) => s.hooks("POST", "/webhook-endpoints", { url: RECEIVER, event_types })
      expectError(yield* post(["run.succeeded", "run.started"]), 400, "invalid_request", "parameter_invalid", "event_types.1")
      expectError(yield* post(["schedule.fired"]), 400, "invalid_request", "parameter_invalid", "event_types.0")
      expectError(yield* post([]), 400, "invalid_request", "parameter_invalid", "event_types")
      expectError(
        yield* s.hooks("POST", "/webhook-endpoints", { url: RECEIVER }),
        400,
        "invalid_request",
        "parameter_missing",
        "event_types"
      )
      const all = expectSingle(yield* post(WEBHOOK_EVENT_TYPES), 201)
      expect(all.event_types).toEqual([...WEBHOOK_EVENT_TYPES])
    }))

  it.scoped("update: url, event types, enabled, description; a disabled endpoint gets nothing; delete removes it and its deliveries", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* startReceiver()
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(RECEIVER, ["run.failed"])
      const patch = (body: unknown) => s.hooks("PATCH", `/webhook-endpoints/${endpoint.id}`, body)
      expectErrorCode(yield* patch({}), 400, "parameter_missing")
      const updated = expectSingle(
        yield* patch({ url: receiver.url, event_types: ["run.succeeded"], description: "all runs", enabled: false })
      )
      expect(updated).toMatchObject({ url: receiver.url, event_types: ["run.succeeded"], description: "all runs", enabled: false })
      expect(expectSingle(yield* patch({ description: null })).description).toBeNull()

      // disabled: no delivery is written for its events
      yield* s.finishedRun()
      for (let i = 0; i < 5; i++) yield* settle
      expect(yield* s.deliveries()).toHaveLength(0)
      expect(receiver.received).toHaveLength(0)

      expect(expectSingle(yield* patch({ enabled: true })).enabled).toBe(true)
      yield* s.finishedRun()
      yield* waitFor(Effect.sync(() => receiver.received.length), (n) => n >= 1)
      const [delivery] = yield* waitFor(s.deliveries(), (d) => d.length === 1 && d[0].status === "succeeded")
      expect(delivery!.endpoint_id).toBe(endpoint.id)

      const deleted = expectSingle(yield* s.hooks("DELETE", `/webhook-endpoints/${endpoint.id}`))
      expect(deleted).toEqual({ id: endpoint.id, object: "webhook_endpoint", deleted: true })
      expectErrorCode(yield* s.hooks("GET", `/webhook-endpoints/${endpoint.id}`), 404, "resource_missing")
      expectErrorCode(yield* s.hooks("DELETE", `/webhook-endpoints/${endpoint.id}`), 404, "resource_missing")
      expectErrorCode(yield* s.hooks("GET", `/webhook-deliveries/${delivery!.id}`), 404, "resource_missing")
      const [left] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = ${endpoint.id}`
      expect(left!.n).toBe(0)
    }))

  it.effect("at most 16 endpoints per environment (D20): the 17th is 429 quota_exceeded, nothing stored; a delete gives its place back", () =>
    Effect.gen(function*() {
      const s = yield* webhookSandbox()
      const reader = (yield* createKey(s.tenantId, ["usage:read"], "quotas")).secret
      const used = Effect.map(
        request("GET", `${s.P}/quotas`, { key: reader }),
        (r) => expectList(r).items.find((q) => q.name === "webhook_endpoints")
      )
      const listed = Effect.map(s.hooks("GET", "/webhook-endpoints?limit=100"), (r) => expectList(r).items.length)
      const ids: Array<string> = []
      for (let i = 0; i < 16; i++) ids.push((yield* s.createEndpoint(RECEIVER, ["run.failed"])).id)
      const body = { url: RECEIVER, event_types: ["run.failed"] }
      const refused = yield* s.hooks("POST", "/webhook-endpoints", body, "the-17th")
      expectError(refused, 429, "rate_limited", "quota_exceeded")
      expect(refused.headers.get("retry-after")).toBe("60")
      expect(refused.body.error.message).toContain("webhook_endpoints")
      expect(yield* listed).toBe(16)
      expect(yield* used).toMatchObject({ limit: 16, used: 16 })

      expectSingle(yield* s.hooks("DELETE", `/webhook-endpoints/${ids[3]}`))
      expect(yield* used).toMatchObject({ used: 15 })
      // the refusal was not stored under its Idempotency-Key: the same request now creates one
      const created = expectSingle(yield* s.hooks("POST", "/webhook-endpoints", body, "the-17th"), 201)
      expect(created.secret).toMatch(/^whsec_/)
      expect(yield* listed).toBe(16)
      expect(yield* used).toMatchObject({ used: 16 })
      expectErrorCode(yield* s.hooks("POST", "/webhook-endpoints", body), 429, "quota_exceeded")
    }))

  it.effect("lists (D6): newest first, pages by cursor without duplicates, a foreign cursor is 400", () =>
    Effect.gen(function*() {
      const s = yield* webhookSandbox()
      const ids: Array<string> = []
      for (let i = 0; i < 3; i++) ids.push((yield* s.createEndpoint(RECEIVER, ["run.failed"])).id)
      const first = expectList(yield* s.hooks("GET", "/webhook-endpoints?limit=2"))
      expect(first.items.map((e) => e.id)).toEqual([ids[2], ids[1]])
      expect(first.next_cursor).toBeTypeOf("string")
      const second = expectList(yield* s.hooks("GET", `/webhook-endpoints?limit=2&cursor=${first.next_cursor}`))
      expect(second.items.map((e) => e.id)).toEqual([ids[0]])
      expect(second.next_cursor).toBeNull()
      expectError(
        yield* s.hooks("GET", `/webhook-deliveries?cursor=${first.next_cursor}`),
        400,
        "invalid_request",
        "invalid_cursor",
        "cursor"
      )
      expectErrorCode(yield* s.hooks("GET", "/webhook-deliveries?status=done"), 400, "parameter_invalid")
      expect(expectList(yield* s.hooks("GET", `/webhook-deliveries?endpoint_id=${ids[0]}&status=pending`)).items).toEqual([])
    }))

  it.effect("scopes: reads need webhooks:read, changes webhooks:write; another tenant's endpoint is 404", () =>
    Effect.gen(function*() {
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(RECEIVER, ["run.failed"])
      const reader = (yield* createKey(s.tenantId, ["webhooks:read"], "reader")).secret
      const runner = (yield* createKey(s.tenantId, RUN_SCOPES, "runner")).secret
      const as = (key: string, method: string, path: string, body?: unknown) =>
        request(method, `${s.P}${path}`, { key, ...(body === undefined ? {} : { body }) })
      expect((yield* as(reader, "GET", "/webhook-endpoints")).status).toBe(200)
      expect((yield* as(reader, "GET", `/webhook-endpoints/${endpoint.id}`)).status).toBe(200)
      expect((yield* as(reader, "GET", "/webhook-deliveries")).status).toBe(200)
      for (
        const [method, path, body] of [
          ["POST", "/webhook-endpoints", { url: RECEIVER, event_types: ["run.failed"] }],
          ["PATCH", `/webhook-endpoints/${endpoint.id}`, { enabled: false }],
          ["DELETE", `/webhook-endpoints/${endpoint.id}`, undefined],
          ["POST", `/webhook-endpoints/${endpoint.id}/rotate-secret`, undefined],
          ["POST", "/webhook-deliveries/msg_x/replay", undefined]
        ] as const
      ) {
        expectError(yield* as(reader, method, path, body), 403, "permission_error", "missing_scope")
      }
      for (const path of ["/webhook-endpoints", `/webhook-endpoints/${endpoint.id}`, "/webhook-deliveries"]) {
        expectError(yield* as(runner, "GET", path), 403, "permission_error", "missing_scope")
      }
      // another tenant's key: the endpoint does not exist for it
      const other = yield* webhookSandbox()
      expectErrorCode(yield* other.hooks("GET", `/webhook-endpoints/${endpoint.id}`), 404, "resource_missing")
      expectErrorCode(yield* other.hooks("PATCH", `/webhook-endpoints/${endpoint.id}`, { enabled: false }), 404, "resource_missing")
      expect(expectSingle(yield* s.hooks("GET", `/webhook-endpoints/${endpoint.id}`)).enabled).toBe(true)
    }))

  it.effect("the document: the D18 operations with their ids, paths, scopes and success statuses", () =>
    Effect.gen(function*() {
      const doc = (yield* request("GET", "/v1/openapi.json")).body
      const P = "/v1/tenants/{tenant_id}/environments/{environment}"
      const expected: Record<string, [string, string, string, string]> = {
        createWebhookEndpoint: ["post", `${P}/webhook-endpoints`, "webhooks:write", "201"],
        listWebhookEndpoints: ["get", `${P}/webhook-endpoints`, "webhooks:read", "200"],
        getWebhookEndpoint: ["get", `${P}/webhook-endpoints/{endpoint_id}`, "webhooks:read", "200"],
        updateWebhookEndpoint: ["patch", `${P}/webhook-endpoints/{endpoint_id}`, "webhooks:write", "200"],
        deleteWebhookEndpoint: ["delete", `${P}/webhook-endpoints/{endpoint_id}`, "webhooks:write", "200"],
        rotateWebhookEndpointSecret: ["post", `${P}/webhook-endpoints/{endpoint_id}/rotate-secret`, "webhooks:write", "200"],
        listWebhookDeliveries: ["get", `${P}/webhook-deliveries`, "webhooks:read", "200"],
        getWebhookDelivery: ["get", `${P}/webhook-deliveries/{delivery_id}`, "webhooks:read", "200"],
        replayWebhookDelivery: ["post", `${P}/webhook-deliveries/{delivery_id}/replay`, "webhooks:write", "202"]
      }
      for (const [id, [method, path, scope, success]] of Object.entries(expected)) {
        const op = doc.paths[path]?.[method]
        expect(op?.operationId, id).toBe(id)
        expect(op.security, id).toEqual([{ ServiceKey: [scope] }])
        expect(Object.keys(op.responses), id).toContain(success)
        expect(op.summary, id).toBeTypeOf("string")
      }
      const codes = doc.paths[`${P}/webhook-endpoints`].post.responses["400"]["x-error-rules"].map((r: any) => `${r.code}:${r.param}`)
      expect(codes).toContain("destination_refused:url")
      const types = doc.components.schemas.WebhookEventType.enum
      expect(types).toEqual([...WEBHOOK_EVENT_TYPES])
    }))
})
