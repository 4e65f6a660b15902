/**
 * The scripted model (D12) through the same step engine as the HTTP providers: text with
 * {{input}} and usage in words, tool calls, fail, a tool not offered, sleeps on TestClock (the
 * request timeout does not apply), invalid settings and an unknown provider.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option, TestClock } from "effect"
import { LOOKUP, scripted, withServer } from "./support/StepEngineHarness.js"

describe("step engine: the scripted model", () => {
  it.scoped("text with {{input}}: Final, usage in words", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const result = yield* engine.step(scripted([{ type: "text", text: "echo {{input}}" }]))
        // input: "Be brief." (2) + "Hi there" (2); output: "echo Hi there" (3)
        expect(result).toEqual({
          _tag: "Final",
          text: "echo Hi there",
          usage: { input_tokens: 4, output_tokens: 3, model_calls: 1 },
          provider_request_id: "scripted_0"
        })
      })
    ))

  it.scoped("tool_call: ToolCalls with the scripted input; the step after a tool result takes the next step", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const steps = [
          { type: "tool_call", tool: "lookup_order", input: { order_id: "o_4" } },
          { type: "text", text: "done: {{input}}" }
        ]
        const first = yield* engine.step(scripted(steps, { tools: [LOOKUP] }))
        expect(first).toMatchObject({ _tag: "ToolCalls", calls: [{ call_id: "call_0", name: "lookup_order", input: { order_id: "o_4" } }] })
        expect(first._tag === "ToolCalls" && first.text).toBeUndefined()
        const second = yield* engine.step(scripted(steps, {
          tools: [LOOKUP],
          conversation: [
            { type: "user_message", text: "find o_4" },
            { type: "tool_call", call_id: "call_0", name: "lookup_order", input: { order_id: "o_4" } },
            { type: "tool_result", call_id: "call_0", name: "lookup_order", output: { status: "shipped" }, is_error: false }
          ]
        }))
        expect(second).toMatchObject({ _tag: "Final", text: "done: find o_4" })
      })
    ))

  it.scoped("fail is ModelFailed carrying the message", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(engine.step(scripted([{ type: "fail", message: "the model is on fire" }])))
        expect(error).toMatchObject({ _tag: "ModelFailed", provider: "scripted", message: "the model is on fire" })
      })
    ))

  it.scoped("a tool_call step for a tool not offered is ModelInvalidResponse", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(engine.step(scripted([{ type: "tool_call", tool: "lookup_order", input: {} }])))
        expect(error).toMatchObject({ _tag: "ModelInvalidResponse", provider: "scripted" })
      })
    ))

  it.scoped("sleep: the step completes only after TestClock passes it, and the request timeout does not apply", () =>
    withServer(
      (_, engine) =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(
            engine.step(scripted([{ type: "sleep", seconds: 5 }, { type: "text", text: "woke up: {{input}}" }]))
          )
          yield* TestClock.adjust("4 seconds")
          expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
          yield* TestClock.adjust("1 second")
          expect(yield* Fiber.join(fiber)).toMatchObject({ _tag: "Final", text: "woke up: Hi there" })
        }),
      { requestTimeoutSeconds: 1 }
    ))

  it.scoped("invalid scripted settings are ModelFailed; an unknown provider is ModelFailed", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        expect(yield* Effect.flip(engine.step(scripted([])))).toMatchObject({ _tag: "ModelFailed", provider: "scripted" })
        const unknown = scripted([{ type: "text", text: "x" }])
        expect(yield* Effect.flip(engine.step({ ...unknown, profile: { ...unknown.profile, provider: "gemini" } }))).toMatchObject({
          _tag: "ModelFailed",
          provider: "gemini"
        })
      })
    ))

  it.scoped("two tools with the same name are refused", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(engine.step(scripted([{ type: "text", text: "x" }], { tools: [LOOKUP, LOOKUP] })))
        expect(error).toMatchObject({ _tag: "ModelFailed" })
      })
    ))
})
