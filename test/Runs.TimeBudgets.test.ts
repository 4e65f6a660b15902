/**
 * The time budgets of a run (D7, D8) on TestClock: the execution budget, the start deadline, the
 * earliest budget winning (authorization before execution), and a scripted sleep within the budget
 * running on the same Clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { defaultRunConfig } from "../src/Config/AppConfig.js"
import { makeTestApp } from "./support/App.js"
import { expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { advanceUntil, eventually, settle } from "./support/Waiting.js"

describe("runs: time budgets (TestClock)", () => {
  const withApp = (overrides: Partial<typeof defaultRunConfig>, body: Effect.Effect<void, unknown, any>) =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* body.pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, ...overrides } })))
    })

  it.effect("active execution: a run still working after the execution budget ends expired", () =>
    withApp(
      { executionSeconds: 240 },
      Effect.gen(function*() {
        // The model answers 60 s after the budget (here 4 min) ended (an answer at its very end races
        // it: an answer committed in one statement while the budget interrupts its actor still counts).
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 300 }, { type: "text", text: "too late" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        yield* eventually(s.getRun(run.id), (r) => r.status === "running")
        yield* TestClock.adjust("239 seconds")
        yield* settle
        expect((yield* s.getRun(run.id)).status).toBe("running")
        const ended = yield* advanceUntil("1 second", s.getRun(run.id), (r) => isTerminal(r.status), 10)
        expect(ended).toMatchObject({ status: "expired", status_reason: "execution_deadline_exceeded" })
        expect((yield* s.events(run.id)).items.at(-1).type).toBe("run.expired")
      })
    ), 60_000)

  it.effect(
    "start deadline: a run that cannot start within 5 minutes ends expired",
    () =>
      withApp(
        { maxActiveRunsPerCell: 1 },
        Effect.gen(function*() {
          const s = yield* scriptedSandbox([{ type: "sleep", seconds: 300 }, { type: "text", text: "x" }])
          const blocker = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* eventually(s.getRun(blocker.id), (r) => r.status === "running")
          const waiting = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* TestClock.adjust("200 seconds")
          yield* settle
          expect((yield* s.getRun(waiting.id)).status).toBe("queued")
          const ended = yield* advanceUntil("10 seconds", s.getRun(waiting.id), (r) => isTerminal(r.status), 20)
          expect(ended).toMatchObject({ status: "expired", status_reason: "start_deadline_exceeded", started_at: null })
        })
      ),
    60_000
  )

  it.effect(
    "the earliest budget wins: authorization (here 2 min) before the 5 min execution budget",
    () =>
      withApp(
        { authorizationSeconds: 120 },
        Effect.gen(function*() {
          const s = yield* scriptedSandbox([{ type: "sleep", seconds: 290 }, { type: "text", text: "x" }])
          const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
          yield* eventually(s.getRun(run.id), (r) => r.status === "running")
          const ended = yield* advanceUntil("10 seconds", s.getRun(run.id), (r) => isTerminal(r.status), 20)
          expect(ended).toMatchObject({ status: "expired", status_reason: "authorization_expired" })
          // ended at the 2 min authorization, long before the 5 min execution budget; the stamp is the
          // test clock when the commit ran, which a loaded machine may reach a few 10 s steps later
          expect(Date.parse(ended.completed_at) - Date.parse(ended.created_at)).toBeLessThan(200_000)
        })
      ),
    60_000
  )

  it.effect("a sleep within the budget completes: the scripted sleep runs on the same Clock", () =>
    withApp(
      {},
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 120 }, { type: "text", text: "after two minutes" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        yield* eventually(s.getRun(run.id), (r) => r.status === "running")
        const ended = yield* advanceUntil("30 seconds", s.getRun(run.id), (r) => isTerminal(r.status), 10)
        expect(ended).toMatchObject({ status: "succeeded", output: [{ type: "text", text: "after two minutes" }] })
      })
    ), 60_000)
})
