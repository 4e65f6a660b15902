/**
 * Actor sessions hardened (D19): a token works only with the key that created its session; an
 * identity provider's assertion is accepted once (its `jti`, per environment and issuer) and only
 * while younger than 5 minutes (`iat`, 30 s of clock tolerance); used assertions are swept once
 * expired and purged with their environment.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, type Layer, type Scope } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import type { AppConfigShape } from "../src/Config/AppConfig.js"
import { Deletions } from "../src/Platform/Deletions.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { TOOL_SCOPES } from "./support/Sandboxes.js"
import { REFUND, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { eventually } from "./support/Waiting.js"

/** Used assertions of a tenant, as stored. */
const usedAssertions = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ issuer: string; jti: string; expires_at: Date }>`
      SELECT issuer, jti, expires_at FROM used_assertions WHERE tenant_id = ${tenantId}`.pipe(Effect.orDie))

type Sandbox = Effect.Effect.Success<ReturnType<typeof toolHostSandbox>>
/** What a test on the app may use: the app's services and a scope. */
type AppServices = Layer.Layer.Success<ReturnType<typeof makeTestApp>> | Scope.Scope

/** A live test on a tool sandbox (identity provider, user, manager key) running these steps. */
const sandboxTest = <E>(
  name: string,
  steps: ReadonlyArray<Record<string, unknown>>,
  test: (s: Sandbox) => Effect.Effect<void, E, AppServices>,
  settings: Partial<AppConfigShape> = {}
) =>
  it.live(
    name,
    () => Effect.flatMap(toolHostSandbox(steps), test).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), ...settings }))),
    30_000
  )

const HELLO = [{ type: "text", text: "Hello." }]

/** An identity provider's key set served on 127.0.0.1 (allowlisted by the tool settings): its URL. */
const servedKeySet = (body: () => string) =>
  Effect.gen(function*() {
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      res.end(body())
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => void server.listen(0, "127.0.0.1", () => resume(Effect.void))),
      () => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
    )
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`
  })

describe("actor sessions (D19)", () => {
  sandboxTest(
    "a remote key set is read up to 64 KiB (D20): a larger one is refused, the same keys within it work",
    HELLO,
    (s) =>
      Effect.gen(function*() {
        // the provider's key, then filler keys (another key type) up to the size wanted
        let size = 60 * 1024
        const keySet = () => {
          const filler = { kty: "oct", kid: "filler", k: "x".repeat(1000) }
          const keys: Array<unknown> = [s.publicJwk]
          while (JSON.stringify({ keys }).length < size) keys.push(filler)
          return JSON.stringify({ keys })
        }
        const url = yield* servedKeySet(keySet)
        expectSingle(
          yield* s.call("PATCH", "/settings", {
            identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks_url: url }
          })
        )
        expectSingle(yield* s.postSession(yield* s.assertion()), 201)
        // the same URL now serves more than 64 KiB (a new environment setting makes the service fetch it again)
        size = 70 * 1024
        expectSingle(
          yield* s.call("PATCH", "/settings", {
            identity_provider: { issuer: "https://idp.acme.test", audience: "agent-platform", jwks_url: `${url}?v=2` }
          })
        )
        const refused = yield* s.postSession(yield* s.assertion())
        expectErrorCode(refused, 403, "invalid_assertion")
        expect(refused.body.error.message).toContain("larger than 65536 bytes")
      })
  )

  sandboxTest("an actor token works only with the key that created its session", REFUND, (s) =>
    Effect.gen(function*() {
      const token = yield* s.actorToken // made through the manager key
      const conv = expectSingle(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
      const runWith = (key: string, actorToken: string) =>
        request("POST", `${s.sb.P}/conversations/${conv.id}/runs`, {
          key,
          body: { input: [{ type: "text", text: "refund order o-1" }] },
          headers: { "x-actor-token": actorToken }
        })
      // another key of the same environment, with the same scopes, cannot use this token
      const other = yield* createKey(s.sb.tenantId, TOOL_SCOPES, "other")
      const viaOther = yield* runWith(other.secret, token)
      expectErrorCode(viaOther, 403, "actor_token_invalid")
      const unknown = yield* runWith(other.secret, "act_forged")
      expectErrorCode(unknown, 403, "actor_token_invalid")
      expect(viaOther.body.error.message).toBe(unknown.body.error.message)

      // with the key that made it, the token acts for the user
      const run = expectSingle(yield* runWith(s.key, token), 202)
      expect(run.user_id).toBe(s.user.id)
      const approval = yield* s.approvalOf(run.id)
      const decide = (key: string) =>
        request("POST", `${s.sb.P}/approvals/${approval.id}/decision`, {
          key,
          body: { decision: "approve" },
          headers: { "x-actor-token": token }
        })
      expectErrorCode(yield* decide(other.secret), 403, "actor_token_invalid")
      expect((yield* s.call("GET", `/approvals/${approval.id}`)).body.data.status).toBe("pending")
      expect(yield* Effect.map(decide(s.key), (r) => expectSingle(r))).toMatchObject({
        status: "approved",
        decided_by: { type: "user", id: s.user.id }
      })
    }))

  sandboxTest(
    "an assertion is accepted once: a second session from it is refused, whichever key asks",
    HELLO,
    (s) =>
      Effect.gen(function*() {
        const signed = yield* s.assertion()
        expectSingle(yield* s.postSession(signed), 201)
        const again = yield* s.postSession(signed) // a new Idempotency-Key
        expectErrorCode(again, 403, "invalid_assertion")
        expect(again.body.error.message).toContain("already used")
        const other = yield* createKey(s.sb.tenantId, ["actor-sessions:write"], "sessions")
        expectErrorCode(yield* s.postSession(signed, other.secret), 403, "invalid_assertion")
        // another assertion of the provider is accepted
        expectSingle(yield* s.postSession(yield* s.assertion()), 201)
        expect(yield* usedAssertions(s.sb.tenantId)).toHaveLength(2)
      })
  )

  sandboxTest(
    "an assertion needs a jti and an iat no older than 5 minutes and not in the future (30 s tolerance)",
    HELLO,
    (s) =>
      Effect.gen(function*() {
        const now = Math.floor(Date.now() / 1000)
        const refused = [
          { jti: undefined },
          { jti: 42 },
          { jti: "" },
          { iat: undefined },
          { iat: now - 6 * 60, exp: now + 365 * 24 * 3600 },
          { iat: now + 120 }
        ]
        for (const claims of refused) {
          const reply = yield* s.postSession(yield* s.assertion(3600, claims))
          expectErrorCode(reply, 403, "invalid_assertion")
          expect(reply.body.error.message, JSON.stringify(claims)).toMatch(/jti|iat/)
        }
        expect(yield* usedAssertions(s.sb.tenantId)).toEqual([])
        // within the tolerance: a few seconds ahead, or 5 minutes old
        expectSingle(yield* s.postSession(yield* s.assertion(3600, { iat: now + 10 })), 201)
        expectSingle(yield* s.postSession(yield* s.assertion(3600, { iat: now - 5 * 60 + 5 })), 201)
      })
  )

  sandboxTest(
    "used assertions expire with the assertion, are swept once expired, and are purged with their environment",
    HELLO,
    (s) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const now = Math.floor(Date.now() / 1000)
        // kept until the earlier of iat + 5 minutes and exp, plus the 30 s tolerance
        expectSingle(yield* s.postSession(yield* s.assertion(120, { iat: now, exp: now + 120, jti: "short" })), 201)
        expectSingle(yield* s.postSession(yield* s.assertion(3600, { iat: now, exp: now + 3600, jti: "long" })), 201)
        const stored = new Map((yield* usedAssertions(s.sb.tenantId)).map((r) => [r.jti, r]))
        expect(stored.get("short")!.expires_at.getTime()).toBe((now + 120 + 30) * 1000)
        expect(stored.get("long")!.expires_at.getTime()).toBe((now + 300 + 30) * 1000)
        expect(stored.get("long")!.issuer).toBe("https://idp.acme.test")

        // an expired row is swept by the next session made
        yield* sql`UPDATE used_assertions SET expires_at = now() - interval '1 second' WHERE tenant_id = ${s.sb.tenantId} AND jti = 'short'`
          .pipe(Effect.orDie)
        expectSingle(yield* s.postSession(yield* s.assertion()), 201)
        expect((yield* usedAssertions(s.sb.tenantId)).map((r) => r.jti)).not.toContain("short")
        expect(yield* usedAssertions(s.sb.tenantId)).toHaveLength(2)

        // deleting the environment purges them
        const deleter = yield* createKey(s.sb.tenantId, ["environments:write"], "deleter")
        expect((yield* request("DELETE", s.sb.P, { key: deleter.secret })).status).toBe(202)
        yield* (yield* Deletions).runDue // (or the worker's own pass, already under way)
        expect(yield* eventually(usedAssertions(s.sb.tenantId), (rows) => rows.length === 0)).toEqual([])
        const [sessions] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM actor_sessions WHERE tenant_id = ${s.sb.tenantId}`
          .pipe(Effect.orDie)
        expect(sessions!.n).toBe(0)
      }),
    { purgeDelaySeconds: 0 }
  )
})
