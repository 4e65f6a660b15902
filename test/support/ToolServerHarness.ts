/**
 * What the tool server SDK suites (test/ToolServer.*.test.ts) share: a signing platform with its
 * key set (test/support/Invocations.ts), a fresh database with the example orders server on it,
 * signed invocations and reconciliations with any part changed, and assertions on the replies.
 * Loads nothing of the platform: the SDK stands alone.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { type ExampleOptions, type ExampleServer, startExample } from "../../src/ToolServer/Example.js"
import { freshDatabase } from "./Database.js"
import { call, ENVIRONMENT, ISSUER, makePlatform, type Platform, type Reply, type SignOptions, TENANT } from "./Invocations.js"

export interface Env {
  readonly platform: Platform
  readonly example: ExampleServer
  readonly sql: SqlClient.SqlClient
}

/** A platform (key + key set server), a fresh database and the example server on it. */
export const setup = (options: Partial<ExampleOptions> = {}) =>
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

export const newOperationId = () => `op_${randomBytes(8).toString("hex")}`
export const now = () => Math.floor(Date.now() / 1000)

export type Overrides = Partial<Omit<SignOptions, "audience" | "body">> & {
  /** The token as signed is for this body; `send` is what actually goes on the wire. */
  readonly send?: string
  readonly audience?: string
  /** X-Operation-Id header; default the signed operation id, `null` for none. */
  readonly operationHeader?: string | null
  readonly token?: string | null
  readonly timeoutMs?: number
}

/** POST `input` to `path` as the platform would, with any part of the token or request changed. */
export const invoke = (env: Env, path: string, input: unknown, o: Overrides = {}) =>
  Effect.gen(function*() {
    const url = `${env.example.baseUrl}${path}`
    const body = JSON.stringify(input)
    const token = o.token === null ?
      undefined :
      o.token ?? (yield* Effect.promise(() => env.platform.sign({ ...o, audience: o.audience ?? url, body })))
    const header = o.operationHeader === null ? undefined : o.operationHeader ?? o.operationId
    return yield* call("POST", url, {
      body: o.send ?? body,
      ...(token !== undefined ? { token } : {}),
      ...(header !== undefined ? { operationId: header } : {}),
      ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {})
    })
  })

/** The signed reconciliation GET for `operationId`. */
export const reconcile = (env: Env, operationId: string, o: { readonly tokenOperationId?: string; readonly token?: null } = {}) =>
  Effect.gen(function*() {
    const url = `${env.example.baseUrl}/refunds/operations/${operationId}`
    const token = o.token === null ?
      undefined :
      yield* Effect.promise(() => env.platform.sign({ audience: url, body: "", operationId: o.tokenOperationId ?? operationId }))
    return yield* call("GET", url, token !== undefined ? { token, operationId } : { operationId })
  })

export const ok = (reply: Reply) => {
  expect(reply._tag).toBe("Reply")
  if (reply._tag !== "Reply") throw new Error("no reply")
  expect({ status: reply.status, body: reply.body }).toEqual({ status: 200, body: reply.body })
  if (reply.status !== 200) throw new Error(`expected 200, got ${reply.status}: ${reply.text}`)
  return reply.body
}

export const rejected = (reply: Reply, status: number, code: string) => {
  expect(reply._tag).toBe("Reply")
  if (reply._tag !== "Reply") throw new Error("no reply")
  expect({ status: reply.status, code: reply.body?.error?.code }).toEqual({ status, code })
  expect(typeof reply.body.error.message).toBe("string")
  return reply.body
}

export const refund = (orderId: string, amount: number) => ({ order_id: orderId, amount })
