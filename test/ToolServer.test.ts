/**
 * The customer tool SDK (src/ToolServer) end to end: real Ed25519 tokens signed as the platform
 * signs them (test/support/Invocations.ts), a real key set over HTTP, the example orders server on
 * 127.0.0.1 and its own fresh Postgres database.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Redacted } from "effect"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { randomBytes } from "node:crypto"
import { inject } from "vitest"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import {
  CREATE_REFUND_PATH,
  type ExampleOptions,
  exampleOperations,
  type ExampleServer,
  GET_ORDER_PATH,
  startExample
} from "../src/ToolServer/Example.js"
import { makeToolServer, makeVerifier, nodeListener } from "../src/ToolServer/index.js"
import {
  call,
  ENVIRONMENT,
  hs256Token,
  ISSUER,
  makePlatform,
  type Platform,
  type Reply,
  type SignOptions,
  TENANT,
  unsecuredToken
} from "./support/Invocations.js"

/**
 * A fresh database on the suite's Postgres, dropped with the scope. Like App.ts's `freshDatabase`,
 * but without loading the platform: the SDK stands alone.
 */
const freshDatabase = Effect.acquireRelease(
  Effect.gen(function*() {
    const name = `t_${randomBytes(6).toString("hex")}`
    yield* admin((sql) => sql`CREATE DATABASE ${sql(name)}`)
    const url = new URL(inject("databaseUrl"))
    url.pathname = `/${name}`
    return { name, url: url.toString() }
  }),
  ({ name }) => admin((sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`).pipe(Effect.ignore)
)

function admin<A>(f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) {
  return Effect.flatMap(SqlClient.SqlClient, f).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(inject("databaseUrl")), maxConnections: 1 })),
    Effect.orDie
  )
}

interface Env {
  readonly platform: Platform
  readonly example: ExampleServer
  readonly sql: SqlClient.SqlClient
}

/** A platform (key + key set server), a fresh database and the example server on it. */
const setup = (options: Partial<ExampleOptions> = {}) =>
  Effect.gen(function*() {
    const { url } = yield* freshDatabase
    const db = yield* Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 10 }))
    const platform = yield* makePlatform
    const example = yield* startExample({
      jwksUrl: platform.jwksUrl,
      issuer: ISSUER,
      tenantId: TENANT,
      environment: ENVIRONMENT,
      ...options
    }).pipe(Effect.provide(db))
    const sql = yield* Effect.provide(SqlClient.SqlClient, db)
    return { platform, example, sql } satisfies Env
  })

const newOperationId = () => `op_${randomBytes(8).toString("hex")}`
const now = () => Math.floor(Date.now() / 1000)

type Overrides = Partial<Omit<SignOptions, "audience" | "body">> & {
  /** The token as signed is for this body; `send` is what actually goes on the wire. */
  readonly send?: string
  readonly audience?: string
  /** X-Operation-Id header; default the signed operation id, `null` for none. */
  readonly operationHeader?: string | null
  readonly token?: string | null
  readonly timeoutMs?: number
}

/** POST `input` to `path` as the platform would, with any part of the token or request changed. */
const invoke = (env: Env, path: string, input: unknown, o: Overrides = {}) =>
  Effect.gen(function*() {
    const url = `${env.example.baseUrl}${path}`
    const body = JSON.stringify(input)
    const token = o.token === null ? undefined : o.token ?? (yield* Effect.promise(() =>
      env.platform.sign({ ...o, audience: o.audience ?? url, body })
    ))
    const header = o.operationHeader === null ? undefined : o.operationHeader ?? o.operationId
    return yield* call("POST", url, {
      body: o.send ?? body,
      ...(token !== undefined ? { token } : {}),
      ...(header !== undefined ? { operationId: header } : {}),
      ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {})
    })
  })

/** The signed reconciliation GET for `operationId`. */
const reconcile = (env: Env, operationId: string, o: { readonly tokenOperationId?: string; readonly token?: null } = {}) =>
  Effect.gen(function*() {
    const url = `${env.example.baseUrl}/refunds/operations/${operationId}`
    const token = o.token === null ? undefined : yield* Effect.promise(() =>
      env.platform.sign({ audience: url, body: "", operationId: o.tokenOperationId ?? operationId })
    )
    return yield* call("GET", url, token !== undefined ? { token, operationId } : { operationId })
  })

const ok = (reply: Reply) => {
  expect(reply._tag).toBe("Reply")
  if (reply._tag !== "Reply") throw new Error("no reply")
  expect({ status: reply.status, body: reply.body }).toEqual({ status: 200, body: reply.body })
  if (reply.status !== 200) throw new Error(`expected 200, got ${reply.status}: ${reply.text}`)
  return reply.body
}

const rejected = (reply: Reply, status: number, code: string) => {
  expect(reply._tag).toBe("Reply")
  if (reply._tag !== "Reply") throw new Error("no reply")
  expect({ status: reply.status, code: reply.body?.error?.code }).toEqual({ status, code })
  expect(typeof reply.body.error.message).toBe("string")
  return reply.body
}

const refund = (orderId: string, amount: number) => ({ order_id: orderId, amount })

describe("tool server SDK: invocation verification (D10)", () => {
  it.scopedLive("a valid read invocation returns the order; an unknown order is the handler's 404", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      expect(ok(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_1" }))).toEqual({
        order_id: "o_1",
        status: "paid",
        amount: 5000
      })
      // a read may carry an operation id too
      const operationId = newOperationId()
      expect(ok(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_2" }, { operationId })).amount).toBe(1200)
      rejected(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_404" }), 404, "order_not_found")
      expect(env.platform.jwksFetches()).toBe(1) // fetched once, then cached
    }))

  it.scopedLive("every forged, stale or misdirected invocation is refused with its own code; no write happens", () =>
    Effect.gen(function*() {
      const env = yield* setup({ minCellGeneration: 3 })
      const write = (o: Overrides, input: unknown = refund("o_1", 10)) =>
        invoke(env, CREATE_REFUND_PATH, input, { operationId: newOperationId(), cellGeneration: 3, ...o })
      const t = now()
      const claims = env.platform.claimsFor({
        audience: `${env.example.baseUrl}${CREATE_REFUND_PATH}`,
        body: JSON.stringify(refund("o_1", 10)),
        operationId: "op_forged",
        cellGeneration: 3
      })

      rejected(yield* write({ token: null }), 401, "missing_token")
      rejected(yield* write({ audience: `${env.example.baseUrl}/refunds/other` }), 401, "wrong_audience")
      rejected(yield* write({ audience: `https://tools.acme.com${CREATE_REFUND_PATH}` }), 401, "wrong_audience")
      rejected(
        yield* write({ claims: { aud: [`${env.example.baseUrl}${CREATE_REFUND_PATH}`, "https://x.test"] } }),
        401,
        "wrong_audience"
      )
      rejected(yield* write({ send: JSON.stringify(refund("o_1", 4999)) }), 401, "digest_mismatch")
      rejected(yield* write({ send: `${JSON.stringify(refund("o_1", 10))} ` }), 401, "digest_mismatch")
      rejected(yield* write({ cellGeneration: 2 }), 401, "stale_cell_generation")
      rejected(yield* write({ cellGeneration: 1.5 }), 401, "invalid_token")
      rejected(yield* write({ iat: t - 300, exp: t - 240 }), 401, "expired_token")
      rejected(yield* write({ iat: t - 90, exp: t - 30 }), 401, "expired_token")
      rejected(yield* write({ iat: t, exp: t + 120 }), 401, "invalid_lifetime")
      rejected(yield* write({ iat: t + 300, exp: t + 330 }), 401, "invalid_token") // issued in the future
      rejected(yield* write({ claims: { iss: "https://evil.test" } }), 401, "wrong_issuer")
      rejected(yield* write({ claims: { tenant_id: "ten_other" } }), 401, "wrong_tenant")
      rejected(yield* write({ claims: { environment: "production" } }), 401, "wrong_environment")
      rejected(yield* write({ claims: { actor: { type: "admin", id: "usr_1" } } }), 401, "invalid_actor")
      rejected(yield* write({ claims: { actor: undefined } }), 401, "invalid_actor")
      rejected(yield* write({ claims: { sub: "usr_2" } }), 401, "invalid_actor")
      rejected(yield* write({ claims: { run_id: undefined } }), 401, "invalid_token")
      rejected(yield* write({ header: { typ: "JWT" } }), 401, "invalid_token")
      rejected(yield* write({ unpublishedKey: true }), 401, "invalid_token") // published kid, other key
      rejected(yield* write({ unpublishedKey: true, header: { kid: "sk_unknown" } }), 401, "invalid_token")
      rejected(yield* write({ token: unsecuredToken(claims) }), 401, "invalid_token")
      const hs = yield* Effect.promise(() => hs256Token(claims, randomBytes(32), env.platform.kid))
      rejected(yield* write({ token: hs }), 401, "invalid_token")
      rejected(yield* write({ token: "not.a.jwt" }), 401, "invalid_token")
      // writes need an operation id, and the header must agree with the claim
      rejected(yield* write({ operationId: undefined, operationHeader: null }), 401, "missing_operation_id")
      rejected(yield* write({ operationHeader: "op_other" }), 401, "operation_id_mismatch")
      rejected(yield* write({ operationId: undefined, operationHeader: "op_header_only" }), 401, "missing_operation_id")

      // the control: the same request, untouched, is accepted
      expect(ok(yield* write({}))).toMatchObject({ order_id: "o_1", amount: 10 })
      expect((yield* env.example.refunds).length).toBe(1)
      expect(env.example.writesExecuted()).toBe(1)
    }))

  it.scopedLive("bad input is refused before anything is stored", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      rejected(yield* invoke(env, CREATE_REFUND_PATH, { order_id: "o_1", amount: -5 }, { operationId: newOperationId() }), 400, "invalid_input")
      const url = `${env.example.baseUrl}${CREATE_REFUND_PATH}`
      const token = yield* Effect.promise(() => env.platform.sign({ audience: url, body: "{not json", operationId: "op_j" }))
      rejected(yield* call("POST", url, { token, body: "{not json", operationId: "op_j" }), 400, "invalid_json")
      rejected(yield* invoke(env, "/nowhere", {}), 404, "not_found")
      expect((yield* env.example.refunds).length).toBe(0)
      expect((yield* env.sql`SELECT 1 FROM tool_operations`).length).toBe(0)
    }))

  it.scopedLive("with trackHighestGeneration, once a newer cell generation has called an older one is refused", () =>
    Effect.gen(function*() {
      const env = yield* setup({ trackHighestGeneration: true })
      ok(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_1" }, { cellGeneration: 4 }))
      ok(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_1" }, { cellGeneration: 5 }))
      rejected(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_1" }, { cellGeneration: 4 }), 401, "stale_cell_generation")
      ok(yield* invoke(env, GET_ORDER_PATH, { order_id: "o_1" }, { cellGeneration: 5 }))
    }))

  it.scopedLive("the SDK's own nodeListener serves the same operations (and refuses oversized bodies)", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const verifier = makeVerifier({ jwksUrl: env.platform.jwksUrl, issuer: ISSUER, tenantId: TENANT, environment: ENVIRONMENT })
      const http = createServer()
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void http.listen(0, "127.0.0.1", () => resume(Effect.void))),
        () => Effect.async<void>((resume) => void http.close(() => resume(Effect.void)))
      )
      const baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
      const server = makeToolServer({ verifier, publicBaseUrl: baseUrl, operations: exampleOperations() })
      http.on("request", yield* nodeListener(server, { maxBodyBytes: 1024 }).pipe(Effect.provideService(SqlClient.SqlClient, env.sql)))
      const other = { ...env, example: { ...env.example, baseUrl } }
      expect(ok(yield* invoke(other, GET_ORDER_PATH, { order_id: "o_1" }))).toEqual({ order_id: "o_1", status: "paid", amount: 5000 })
      const operationId = newOperationId()
      const created = ok(yield* invoke(other, CREATE_REFUND_PATH, refund("o_1", 5), { operationId }))
      expect(ok(yield* reconcile(other, operationId))).toEqual({ operation_id: operationId, status: "succeeded", output: created })
      rejected(yield* invoke(other, GET_ORDER_PATH, { order_id: "o_1", pad: "x".repeat(2000) }), 413, "body_too_large")
      // a token for the example server's URL is not valid here
      rejected(yield* invoke(other, GET_ORDER_PATH, { order_id: "o_1" }, { audience: `${env.example.baseUrl}${GET_ORDER_PATH}` }), 401, "wrong_audience")
    }))

  it.scopedLive("jose's createRemoteJWKSet on the published key set verifies a platform token, and only that", () =>
    Effect.gen(function*() {
      const { platform } = yield* setup()
      const jwks = createRemoteJWKSet(new URL(platform.jwksUrl))
      const audience = "https://tools.acme.com/orders/create"
      const token = yield* Effect.promise(() => platform.sign({ audience, body: "{}", operationId: "op_1" }))
      const { payload, protectedHeader } = yield* Effect.promise(() =>
        jwtVerify(token, jwks, { issuer: ISSUER, audience, algorithms: ["EdDSA"], typ: "tool-invocation+jwt" })
      )
      expect(protectedHeader).toEqual({ alg: "EdDSA", kid: platform.kid, typ: "tool-invocation+jwt" })
      expect(payload).toMatchObject({
        iss: ISSUER,
        aud: audience,
        sub: "usr_1",
        tenant_id: TENANT,
        environment: ENVIRONMENT,
        actor: { type: "user", id: "usr_1" },
        operation_id: "op_1",
        input_digest: "sha-256=RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o",
        cell_generation: 1
      })
      expect(payload.exp! - payload.iat!).toBe(60)
      const forged = yield* Effect.promise(() => platform.sign({ audience, body: "{}", unpublishedKey: true }))
      const refused = yield* Effect.promise(() => jwtVerify(forged, jwks).then(() => "accepted", (e: Error) => e.name))
      expect(refused).toBe("JWSSignatureVerificationFailed")
    }))
})

describe("tool server SDK: the write contract (4.1.2)", () => {
  it.scopedLive("one operation id sent 3 times makes one refund; every answer is the first one's", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const first = ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId }))
      expect(first).toEqual({ refund_id: expect.stringMatching(/^rf_/), order_id: "o_1", amount: 700 })
      for (let i = 0; i < 2; i++) {
        expect(ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId }))).toEqual(first)
      }
      expect(yield* env.example.refunds).toEqual([{ ...first, operation_id: operationId }])
      expect(env.example.writesExecuted()).toBe(1)
      // another operation id is another refund
      const second = ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 700), { operationId: newOperationId() }))
      expect(second.refund_id).not.toBe(first.refund_id)
      expect((yield* env.example.refunds).length).toBe(2)
    }))

  it.scopedLive("5 concurrent deliveries of one operation id: the others wait for the commit, one refund, same answer", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const held = yield* env.example.hooks.holdNextWrite
      const deliveries = yield* Effect.forkAll(
        Array.from({ length: 5 }, () => invoke(env, CREATE_REFUND_PATH, refund("o_2", 100), { operationId })),
        { discard: false }
      )
      yield* held.reached
      yield* Effect.sleep("300 millis") // the other four reach the lock meanwhile
      // in flight, not committed: reconciliation says pending
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "pending" })
      expect((yield* env.example.refunds).length).toBe(0)
      yield* held.release
      const replies = (yield* Fiber.join(deliveries)).map(ok)
      expect(new Set(replies.map((r) => JSON.stringify(r))).size).toBe(1)
      expect(yield* env.example.refunds).toEqual([{ ...replies[0], operation_id: operationId }])
      expect(env.example.writesExecuted()).toBe(1)

      // and without the hold: 5 at once on a new id
      const again = newOperationId()
      const burst = yield* Effect.all(
        Array.from({ length: 5 }, () => invoke(env, CREATE_REFUND_PATH, refund("o_2", 50), { operationId: again })),
        { concurrency: "unbounded" }
      )
      expect(new Set(burst.map((r) => JSON.stringify(ok(r)))).size).toBe(1)
      expect((yield* env.example.refunds).filter((r) => r.operation_id === again).length).toBe(1)
      expect(env.example.writesExecuted()).toBe(2)
    }))

  it.scopedLive("hang after commit: the caller times out, reconciliation says succeeded with the output, a redelivery replays it", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      env.example.hooks.afterNextCommit("hang")
      const reply = yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 300), { operationId, timeoutMs: 1_000 })
      expect(reply).toMatchObject({ _tag: "Failed", reason: "timeout" })
      const [row] = yield* env.example.refunds
      expect(row).toMatchObject({ order_id: "o_1", amount: 300, operation_id: operationId })
      const output = { refund_id: row!.refund_id, order_id: "o_1", amount: 300 }
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "succeeded", output })
      expect(ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 300), { operationId }))).toEqual(output)
      expect((yield* env.example.refunds).length).toBe(1)
      expect(env.example.writesExecuted()).toBe(1)
    }))

  it.scopedLive("reset or 500 after commit: reconciliation still reports the committed outcome", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const a = newOperationId()
      env.example.hooks.afterNextCommit("reset")
      expect(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 10), { operationId: a })).toMatchObject({
        _tag: "Failed",
        reason: "network"
      })
      expect(ok(yield* reconcile(env, a))).toMatchObject({ operation_id: a, status: "succeeded", output: { amount: 10 } })

      const b = newOperationId()
      env.example.hooks.afterNextCommit("error_500")
      rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 20), { operationId: b }), 500, "internal_error")
      expect(ok(yield* reconcile(env, b))).toMatchObject({ operation_id: b, status: "succeeded", output: { amount: 20 } })
      expect((yield* env.example.refunds).map((r) => r.operation_id).sort()).toEqual([a, b].sort())
    }))

  it.scopedLive("an operation id never seen is not_found; reconciliation is signed for that operation id", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      expect(ok(yield* reconcile(env, operationId))).toEqual({ operation_id: operationId, status: "not_found" })
      rejected(yield* reconcile(env, operationId, { token: null }), 401, "missing_token")
      rejected(yield* reconcile(env, operationId, { tokenOperationId: "op_other" }), 401, "operation_id_mismatch")
      // a token for the invocation URL is not one for the reconciliation URL
      const token = yield* Effect.promise(() =>
        env.platform.sign({ audience: `${env.example.baseUrl}${CREATE_REFUND_PATH}`, body: "", operationId })
      )
      rejected(
        yield* call("GET", `${env.example.baseUrl}/refunds/operations/${operationId}`, { token, operationId }),
        401,
        "wrong_audience"
      )
    }))

  it.scopedLive("a refused write is stored as failed: the write's rows roll back, a replay gets the same failure, reconciliation says failed", () =>
    Effect.gen(function*() {
      const env = yield* setup()
      const operationId = newOperationId()
      const first = rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId }), 422, "refund_exceeds_order")
      expect((yield* env.example.refunds).length).toBe(0) // inserted, then rolled back to the savepoint
      const [stored] = yield* env.sql<{ status: string; completed_at: Date | null }>`
        SELECT status, completed_at FROM tool_operations WHERE operation_id = ${operationId}`
      expect(stored?.status).toBe("failed")
      expect(stored?.completed_at).toBeInstanceOf(Date)

      // even once the refund would fit, the operation id keeps its outcome
      yield* env.sql`UPDATE orders SET amount = 10000 WHERE order_id = 'o_1'`
      expect(rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId }), 422, "refund_exceeds_order")).toEqual(first)
      expect(env.example.writesExecuted()).toBe(1)
      expect(ok(yield* reconcile(env, operationId))).toEqual({
        operation_id: operationId,
        status: "failed",
        error: first.error
      })
      // an unknown order is a stored failure too
      const other = newOperationId()
      rejected(yield* invoke(env, CREATE_REFUND_PATH, refund("o_404", 1), { operationId: other }), 404, "order_not_found")
      expect(ok(yield* reconcile(env, other))).toMatchObject({ status: "failed", error: { code: "order_not_found" } })
      // and a new operation id runs the write again
      ok(yield* invoke(env, CREATE_REFUND_PATH, refund("o_1", 6000), { operationId: newOperationId() }))
      expect((yield* env.example.refunds).length).toBe(1)
    }))
})
