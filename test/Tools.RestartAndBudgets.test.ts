/**
 * Tool runs across a restart and against the clock (issue 5): a run waiting for approval survives
 * a restart and executes its write once after the decision; on TestClock, an undecided approval
 * expires, actor tokens live at most 5 minutes, signing keys rotate with overlap, and the run's
 * authorization budget ends a second pending approval.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { makeTestApp, TestApp } from "./support/App.js"
import { operator, request } from "./support/Client.js"
import { freshDatabase } from "./support/Database.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { TERMINAL } from "./support/Sandboxes.js"
import { connectionBody, startToolHost } from "./support/ToolHost.js"
import { REFUND, TOOL_ISSUER, toolHostSandbox, toolSandbox, toolSettings } from "./support/ToolSandbox.js"
import { advanceUntil, eventually } from "./support/Waiting.js"

describe("restart", () => {
  it.live(
    "a run waiting for approval survives a restart: recovery parks it again, and a decision after it executes the write once",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        const at = { base: "", P: "", tenantId: "" }
        const host = yield* startToolHost({
          jwksUrl: () => `${at.base}${at.P}/jwks.json`,
          issuer: TOOL_ISSUER,
          tenantId: () => at.tenantId
        })
        const cellOf = (tenantId: string) => Effect.map(operator("GET", `/tenants/${tenantId}/environments/sandbox/cell`), (r) => r.body)

        // the first process: the run asks for an approval, then the process stops
        const { s, runId, generation } = yield* Effect.gen(function*() {
          at.base = (yield* TestApp).baseUrl
          const s = yield* toolSandbox({
            server: (sb) => Effect.sync(() => Object.assign(at, { P: sb.P, tenantId: sb.tenantId }) && host),
            connection: connectionBody,
            steps: REFUND
          })
          const run = yield* s.startRun
          yield* s.approvalOf(run.id)
          const cell = yield* cellOf(s.sb.tenantId)
          expect(cell).toMatchObject({ running_actors: 0, parked_runs: 1 })
          return { s, runId: run.id as string, generation: cell.generation as number }
        }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings(), db.url)))

        // the second process on the same database
        yield* Effect.gen(function*() {
          at.base = (yield* TestApp).baseUrl
          const cell = yield* eventually(cellOf(s.sb.tenantId), (c) => c.parked_runs === 1)
          expect(cell).toMatchObject({ running_actors: 0, parked_runs: 1 })
          expect(cell.generation).toBeGreaterThan(generation)
          expect((yield* s.getRun(runId)).status).toBe("requires_action")
          yield* s.decide(runId)
          expect((yield* s.waitFor(runId, TERMINAL)).status).toBe("succeeded")
          expect(host.refunds.size).toBe(1)
          expect(host.calls.map((c) => c.path)).toEqual(["/refunds"])
          expect(host.calls[0]!.claims.cell_generation).toBe(cell.generation)
        }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings(), db.url)))
      }).pipe(Effect.scoped),
    60_000
  )
})

describe("approval budget (TestClock)", () => {
  it.effect("an approval nobody decides expires after 10 minutes: the run ends expired (approval_expired)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        const run = yield* s.startRun
        yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
        yield* TestClock.adjust("9 minutes")
        expect((yield* s.getRun(run.id)).status).toBe("requires_action")
        const done = yield* advanceUntil("10 seconds", s.getRun(run.id), (r) => TERMINAL.includes(r.status))
        expect(done).toMatchObject({ status: "expired", status_reason: "approval_expired" })
        const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
        expect(approval.status).toBe("expired")
        expect(s.host.calls).toHaveLength(0)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
    }), 60_000)
  it.effect(
    "actor tokens live at most 5 minutes; an expired one is refused; a fresh one decides but does not extend the run",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const s = yield* toolHostSandbox(REFUND)
          // an assertion valid for an hour still gives a token of at most 5 minutes
          const created = yield* Clock.currentTimeMillis
          const long = yield* s.actorSession(3600)
          expect(Date.parse(long.expires_at) - created).toBeLessThanOrEqual(5 * 60 * 1000)
          expect(Date.parse(long.expires_at) - created).toBeGreaterThanOrEqual(5 * 60 * 1000 - 1000)

          const run = yield* s.startRun
          const waiting = yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
          const [approval] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
          yield* TestClock.adjust("5 minutes")
          expectErrorCode(
            yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": long.token }),
            403,
            "actor_token_invalid"
          )
          const fresh = yield* s.actorSession()
          expectSingle(
            yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": fresh.token })
          )
          const done = yield* advanceUntil("1 second", s.getRun(run.id), (r) => TERMINAL.includes(r.status))
          expect(done.status).toBe("succeeded")
          expect(done.authorization_expires_at).toBe(waiting.authorization_expires_at)
          expect(s.host.refunds.size).toBe(1)
        }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
      }),
    60_000
  )

  it.effect(
    "signing keys rotate with overlap: the old key stays published until its tokens expired, new calls use the new key",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const app = yield* TestApp
          const s = yield* toolHostSandbox([
            { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
            { type: "text", text: "Shipped." }
          ])
          const jwksUrl = `${app.baseUrl}${s.sb.P}/jwks.json`
          const kids = Effect.map(request("GET", `${s.sb.P}/jwks.json`), (r) => (r.body.keys as Array<any>).map((k) => k.kid as string))
          const first = yield* s.startRun
          yield* advanceUntil("1 second", s.getRun(first.id), (r) => TERMINAL.includes(r.status))
          const oldKid = s.host.calls[0]!.kid!
          expect(yield* kids).toEqual([oldKid])

          const rotated = yield* operator("POST", `/tenants/${s.sb.tenantId}/environments/sandbox/signing-keys/rotate`)
          expect(rotated.status, rotated.text).toBe(200)
          const newKid = rotated.body.kid as string
          const publishUntil = Date.parse(rotated.body.retired_publish_until)
          expect(publishUntil - (yield* Clock.currentTimeMillis)).toBe((60 + 60) * 1000)
          expect(newKid).not.toBe(oldKid)
          expect((yield* kids).sort()).toEqual([oldKid, newKid].sort())
          // a token signed before the rotation still verifies against the published set
          const oldToken = s.host.calls[0]!
          const verified = yield* Effect.promise(() =>
            jwtVerify(oldToken.token, createRemoteJWKSet(new URL(jwksUrl)), {
              issuer: TOOL_ISSUER,
              currentDate: new Date(oldToken.claims.iat * 1000)
            })
          )
          expect(verified.protectedHeader.kid).toBe(oldKid)

          const second = yield* s.startRun
          const done = yield* advanceUntil("1 second", s.getRun(second.id), (r) => TERMINAL.includes(r.status))
          expect(done.status).toBe("succeeded")
          expect(s.host.calls[1]!.kid).toBe(newKid)
          expect(s.host.rejected).toEqual([])

          // after the token life (60 s) and the skew (60 s), only the new key is published
          yield* TestClock.setTime(publishUntil - 1000)
          expect((yield* kids).sort()).toEqual([oldKid, newKid].sort())
          yield* TestClock.setTime(publishUntil + 1000)
          expect(yield* kids).toEqual([newKid])
        }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
      }),
    60_000
  )
  it.effect(
    "the earliest budget wins: a second approval still pending when the run's 15 minutes of authorization end -> authorization_expired",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const s = yield* toolHostSandbox([
            { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
            { type: "tool_call", tool: "create_refund", input: { order_id: "o-2", amount: 7 } },
            { type: "text", text: "Refunded both." }
          ])
          const run = yield* s.startRun
          const created = Date.parse(run.created_at)
          yield* advanceUntil("1 second", s.getRun(run.id), (r) => r.status === "requires_action")
          yield* TestClock.adjust("9 minutes")
          const [first] = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items
          expectSingle(
            yield* s.call("POST", `/approvals/${first.id}/decision`, { decision: "approve" }, { "x-actor-token": yield* s.actorToken })
          )
          // the first refund is made; the second waits for its own approval (10 min would be ~19 min in)
          yield* advanceUntil("1 second", s.call("GET", `/approvals?run_id=${run.id}&status=pending`), (r) => r.body.items.length === 1)
          expect(s.host.refunds.size).toBe(1)
          yield* TestClock.setTime(created + 15 * 60 * 1000 - 5000)
          expect((yield* s.getRun(run.id)).status).toBe("requires_action")
          const done = yield* advanceUntil("1 second", s.getRun(run.id), (r) => TERMINAL.includes(r.status), 30)
          expect(done).toMatchObject({ status: "expired", status_reason: "authorization_expired" })
          expect(Date.parse(done.completed_at)).toBeLessThanOrEqual(created + 15 * 60 * 1000 + 2000)
          const approvals = (yield* s.call("GET", `/approvals?run_id=${run.id}`)).body.items.map((a: any) => a.status).sort()
          expect(approvals).toEqual(["approved", "expired"])
          expect(s.host.refunds.size).toBe(1)
        }).pipe(Effect.scoped, Effect.provide(makeTestApp({ ...toolSettings(), cellIdleTimeoutSeconds: 3600 })))
      }),
    60_000
  )
})
