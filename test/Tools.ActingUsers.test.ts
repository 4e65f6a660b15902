/**
 * Runs acting for a user through an actor session (issue 5): X-Actor-Token, deleting the user
 * stopping the run before its next tool call, idempotency scoped by the user, and a cancel during an
 * accepted write that does not undo it. (A decision and its stored response commit together:
 * crashes at that boundary are in Idempotency.Crash.test.ts.)
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { request } from "./support/Client.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { TERMINAL } from "./support/Sandboxes.js"
import { REFUND, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { eventually } from "./support/Waiting.js"

describe("acting users, cancel during a write", () => {
  it.live(
    "a run made with X-Actor-Token acts for the user; deleting the user stops it before its next tool call",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox([
          { type: "tool_call", tool: "get_order", input: { order_id: "o-1" } },
          { type: "sleep", seconds: 2 },
          { type: "tool_call", tool: "get_order", input: { order_id: "o-2" } },
          { type: "text", text: "Done." }
        ])
        // without a token the service key acts
        const keyRun = yield* s.startRun
        expect(keyRun.user_id).toBeNull()
        expect((yield* s.waitFor(keyRun.id, TERMINAL)).status).toBe("succeeded")
        const keyClaims = s.host.calls[0]!.claims
        expect(keyClaims.actor.type).toBe("api_key")
        expect(keyClaims.sub).toBe(keyClaims.actor.id)
        const conv = expectSingle(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
        expectErrorCode(
          yield* s.call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "hi" }] }, {
            "x-actor-token": "act_forged"
          }),
          403,
          "actor_token_invalid"
        )

        const run = yield* s.startRunWith({ "x-actor-token": yield* s.actorToken })
        expect(run.user_id).toBe(s.user.id)
        expect((yield* s.getRun(run.id)).user_id).toBe(s.user.id)
        yield* eventually(Effect.succeed(s.host.calls), (calls) => calls.length === 3)
        expect(s.host.calls[2]!.claims).toMatchObject({ sub: s.user.id, actor: { type: "user", id: s.user.id }, run_id: run.id })
        // the model is "thinking" (2 s) before its second tool call: the user goes away meanwhile
        expect((yield* s.call("DELETE", `/users/${s.user.id}`)).status).toBe(202)
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done).toMatchObject({ status: "failed", status_reason: "authorization_revoked" })
        expect(s.host.calls).toHaveLength(3)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live(
    "idempotency of a user's request is scoped by the user: a retry with a fresh token replays, the key alone does not",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox([{ type: "text", text: "Hello." }])
        const conv = expectSingle(yield* s.call("POST", "/conversations", { workspace_id: s.ws.id, agent_revision_id: s.rev.id }), 201)
        const post = (headers: Record<string, string>) =>
          request("POST", `${s.sb.P}/conversations/${conv.id}/runs`, {
            key: s.key,
            idempotencyKey: "run-once-1",
            body: { input: [{ type: "text", text: "hi" }] },
            headers
          })
        const first = yield* post({ "x-actor-token": yield* s.actorToken })
        expect(first.status, first.text).toBe(202)
        const retried = yield* post({ "x-actor-token": yield* s.actorToken })
        expect(retried.headers.get("idempotent-replayed")).toBe("true")
        expect(retried.body.data.id).toBe(first.body.data.id)
        yield* s.waitFor(first.body.data.id, TERMINAL)
        const asKey = yield* post({})
        expect(asKey.status, asKey.text).toBe(202)
        expect(asKey.headers.get("idempotent-replayed")).toBeNull()
        expect(asKey.body.data).toMatchObject({ user_id: null })
        expect(asKey.body.data.id).not.toBe(first.body.data.id)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )

  it.live(
    "cancel during an accepted write does not undo it: the write finishes, its result is recorded, then the run is cancelled",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        s.host.knobs.afterWrite = "slow"
        const run = yield* s.startRun
        yield* s.decide(run.id)
        yield* eventually(Effect.succeed(s.host.refunds), (r) => r.size === 1)
        const cancel = yield* s.call("POST", `/runs/${run.id}/cancel`)
        expect(cancel.status, cancel.text).toBeLessThan(300)
        const done = yield* s.waitFor(run.id, TERMINAL)
        expect(done.status).toBe("cancelled")
        const events = yield* s.eventList(run.id)
        const types = events.map((e) => e.type)
        expect(types.slice(-3)).toEqual(["run.cancel_requested", "run.tool_call.completed", "run.cancelled"])
        expect(events.find((e) => e.type === "run.tool_call.completed").data.output).toEqual([...s.host.refunds.values()][0])
        // called once, never reconciled or undone
        expect(s.host.calls.map((c) => c.path)).toEqual(["/refunds"])
        expect(s.host.refunds.size).toBe(1)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )
})
