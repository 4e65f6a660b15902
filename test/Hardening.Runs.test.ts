/**
 * Run content is bounded (D19, issue 14 findings 5 and 6), end to end over HTTP with the scripted
 * model: a text item over 100,000 characters is refused at admission (nothing stored); an answer
 * over it ends the run `failed` with `output_too_large` (usage kept, the run still readable and
 * replayable); the prompt a run sends is a window of the conversation bounded by
 * `runs.contextBytes`, so a long conversation keeps working and its input stays bounded.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

import { defaultRunConfig } from "../src/Config/AppConfig.js"
import { MAX_RUN_TEXT } from "../src/Domain/Runs.js"
import { makeTestApp } from "./support/App.js"
import { expectError, expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

const runsOf = (conversationId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM runs WHERE conversation_id = ${conversationId}`.pipe(
        Effect.map((rows) => rows[0]!.n),
        Effect.orDie
      )
  )

/** `n` distinct words (so the scripted model's token count is the word count). */
const words = (n: number, seed: string) => Array.from({ length: n }, (_, i) => `${seed}${i.toString(36)}`).join(" ")

describe("run content limits (D19)", () => {
  it.live(
    "a text item over 100,000 characters is 400 input_too_large naming it; nothing is stored; exactly the limit is accepted",
    () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "ok" }])
        const conv = yield* s.conversation()
        const refused = yield* s.startRun(conv.id, "x".repeat(MAX_RUN_TEXT + 1))
        expectError(refused, 400, "invalid_request", "input_too_large", "input.0.text")
        expect(refused.text.length).toBeLessThan(2_000) // the refusal does not echo the input
        expect(yield* runsOf(conv.id)).toBe(0)
        const accepted = expectSingle(yield* s.startRun(conv.id, "x".repeat(MAX_RUN_TEXT), { headers: { prefer: "wait=10" } }))
        expect(accepted.status).toBe("succeeded")
        expect(yield* runsOf(conv.id)).toBe(1)
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )

  it.live(
    "an answer over 100,000 characters ends the run failed/output_too_large; usage is kept; GET and the replay answer it",
    () =>
      Effect.gen(function*() {
        // The answer is the input twice: 2 × 60,000 characters.
        const s = yield* scriptedSandbox([{ type: "text", text: "{{input}}{{input}}" }])
        const conv = yield* s.conversation()
        const input = "y".repeat(60_000)
        const once = { headers: { prefer: "wait=10" }, idempotencyKey: "big-answer" }
        const res = yield* s.startRun(conv.id, input, once)
        const run = expectSingle(res)
        expect(run.status).toBe("failed")
        expect(run.status_reason).toBe("output_too_large")
        expect(run.output).toBeNull()
        expect(run.usage).toMatchObject({ model_calls: 1, input_tokens: 3, output_tokens: 1 })
        const events = yield* s.events(run.id)
        const failed = events.items.find((e) => e.type === "run.failed")
        expect(failed.data.error.type).toBe("output_too_large")
        expect(JSON.stringify(events).length).toBeLessThan(20_000) // the oversized text is not kept
        // The replay is the stored 200; GET answers the same terminal run; one run exists.
        const replay = yield* s.startRun(conv.id, input, once)
        expect(replay.status).toBe(200)
        expect(expectSingle(replay).id).toBe(run.id)
        expect(replay.headers.get("idempotent-replayed")).toBe("true")
        expect((yield* s.getRun(run.id)).status).toBe("failed")
        expect(yield* runsOf(conv.id)).toBe(1)
        // The conversation goes on: the next run is admitted and answered.
        const next = expectSingle(yield* s.startRun(conv.id, "short", { headers: { prefer: "wait=10" } }))
        expect(next.status).toBe("succeeded")
      }).pipe(Effect.provide(makeTestApp())),
    60_000
  )

  it.live("the prompt is a bounded window: 30 runs of 2,000 words each, input_tokens stays under the window", () =>
    Effect.gen(function*() {
      // The scripted model counts words; each word here is ~4 bytes, so 20 KB of window holds at
      // most a few thousand words, whatever the conversation's length.
      const contextBytes = 20_000
      const s = yield* scriptedSandbox([{ type: "text", text: "noted" }])
      const conv = yield* s.conversation()
      const inputs: Array<number> = []
      for (let i = 0; i < 30; i++) {
        const run = expectSingle(yield* s.startRun(conv.id, words(2_000, `w${i}x`), { headers: { prefer: "wait=10" } }))
        const done = isTerminal(run.status) ? run : yield* eventually(s.getRun(run.id), (r) => isTerminal(r.status))
        expect(done.status).toBe("succeeded")
        inputs.push(done.usage.input_tokens)
      }
      // Without a window the 30th run would carry 60,000 words; with it, the latest message and
      // what fits of the rest: never more than the latest message plus the window.
      expect(Math.max(...inputs)).toBeLessThan(2_000 + contextBytes / 4)
      expect(inputs[29]).toBeGreaterThanOrEqual(2_000)
    }).pipe(Effect.provide(makeTestApp({ runs: { ...defaultRunConfig, contextBytes: 20_000 } }))), 120_000)
})
