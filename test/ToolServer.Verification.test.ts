/**
 * The customer tool SDK (src/ToolServer) verifying invocations (D10): real Ed25519 tokens signed as
 * the platform signs them, a real key set over HTTP, the example orders server on 127.0.0.1 and
 * its own fresh Postgres database. Every forged, stale or misdirected token is refused with its own
 * code; bad input before anything is stored; the SDK's nodeListener; jose on the published keys.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { randomBytes } from "node:crypto"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { CREATE_REFUND_PATH, exampleOperations, GET_ORDER_PATH } from "../src/ToolServer/Example.js"
import { makeToolServer, makeVerifier, nodeListener } from "../src/ToolServer/index.js"
import { call, ENVIRONMENT, hs256Token, ISSUER, TENANT, unsecuredToken } from "./support/Invocations.js"
import { invoke, newOperationId, now, ok, type Overrides, reconcile, refund, rejected, setup } from "./support/ToolServerHarness.js"

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
      rejected(
        yield* invoke(env, CREATE_REFUND_PATH, { order_id: "o_1", amount: -5 }, { operationId: newOperationId() }),
        400,
        "invalid_input"
      )
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
      rejected(
        yield* invoke(other, GET_ORDER_PATH, { order_id: "o_1" }, { audience: `${env.example.baseUrl}${GET_ORDER_PATH}` }),
        401,
        "wrong_audience"
      )
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
