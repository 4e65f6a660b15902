import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Fiber, Schema, Stream, TestClock } from "effect"
import { ScriptedSettings } from "../src/Domain/Agents.js"
import * as Scripted from "../src/Models/Scripted.js"

const Lookup = Tool.make("lookup", {
  description: "Looks something up",
  parameters: { query: Schema.String, limit: Schema.Number },
  success: Schema.String
})
const LookupToolkit = Toolkit.make(Lookup)

/** Handlers that fail the test if the library ever executes a tool call. */
const toolkitWithFailingHandler = LookupToolkit.pipe(
  Effect.provide(
    LookupToolkit.toLayer({
      lookup: () => Effect.die(new Error("the lookup handler must not run"))
    })
  )
)

const generate = (steps: ScriptedSettings["steps"], prompt: Prompt.RawInput) =>
  Effect.gen(function*() {
    const model = yield* Scripted.make({ steps })
    return yield* model.generateText({ prompt })
  })

/** A conversation with `turns` completed user/assistant exchanges, then a new user message. */
const conversation = (turns: number, last: string): Prompt.Prompt => {
  const messages: Array<Prompt.MessageEncoded> = []
  for (let i = 0; i < turns; i++) {
    messages.push({ role: "user", content: `question ${i}` })
    messages.push({ role: "assistant", content: `answer ${i}` })
  }
  messages.push({ role: "user", content: last })
  return Prompt.make(messages)
}

describe("Scripted model", () => {
  it.effect("text step substitutes {{input}} with the latest user message", () =>
    Effect.gen(function*() {
      const response = yield* generate(
        [{ type: "text", text: "You said: {{input}} ({{input}})" }],
        "hello there"
      )
      expect(response.text).toBe("You said: hello there (hello there)")
      expect(response.finishReason).toBe("stop")
      expect(response.toolCalls).toEqual([])
    }))

  it.effect("the latest user message is used, not the first", () =>
    Effect.gen(function*() {
      const response = yield* generate(
        [{ type: "text", text: "x" }, { type: "text", text: "echo {{input}}" }],
        conversation(1, "second question")
      )
      expect(response.text).toBe("echo second question")
    }))

  it.effect("each call takes the next step and the last step repeats", () =>
    Effect.gen(function*() {
      const steps: ScriptedSettings["steps"] = [
        { type: "text", text: "one" },
        { type: "text", text: "two" },
        { type: "text", text: "three" }
      ]
      const texts: Array<string> = []
      for (let turns = 0; turns < 6; turns++) {
        texts.push((yield* generate(steps, conversation(turns, "go"))).text)
      }
      expect(texts).toEqual(["one", "two", "three", "three", "three", "three"])
    }))

  it.effect("the step is derived from assistant turns in the prompt: 2 prior turns -> step 3", () =>
    Effect.gen(function*() {
      const steps: ScriptedSettings["steps"] = [
        { type: "text", text: "step 1" },
        { type: "text", text: "step 2" },
        { type: "text", text: "step 3" },
        { type: "text", text: "step 4" }
      ]
      const model = yield* Scripted.make({ steps })
      const prompt = conversation(2, "next")
      // Stateless: the same prompt gives the same step every time (a recovered run replays it).
      expect((yield* model.generateText({ prompt })).text).toBe("step 3")
      expect((yield* model.generateText({ prompt })).text).toBe("step 3")
      expect((yield* model.generateText({ prompt: "fresh" })).text).toBe("step 1")
    }))

  it.effect("a tool-call turn counts as an assistant turn", () =>
    Effect.gen(function*() {
      const prompt = Prompt.make([
        { role: "user", content: "find cats" },
        {
          role: "assistant",
          content: [{ type: "tool-call", id: "call_0", name: "lookup", params: { query: "cats", limit: 1 } }]
        },
        {
          role: "tool",
          content: [{ type: "tool-result", id: "call_0", name: "lookup", result: "a cat", isFailure: false, providerExecuted: false }]
        }
      ])
      const response = yield* generate(
        [
          { type: "tool_call", tool: "lookup", input: { query: "cats", limit: 1 } },
          { type: "text", text: "done: {{input}}" }
        ],
        prompt
      )
      expect(response.text).toBe("done: find cats")
    }))

  it.effect("tool_call step yields one unexecuted tool call; the handler does not run", () =>
    Effect.gen(function*() {
      const model = yield* Scripted.make({
        steps: [{ type: "tool_call", tool: "lookup", input: { query: "blue whales", limit: 3 } }]
      })
      const response = yield* model.generateText({
        prompt: "look it up",
        toolkit: toolkitWithFailingHandler,
        disableToolCallResolution: true
      })
      expect(response.toolCalls).toHaveLength(1)
      const call = response.toolCalls[0]!
      expect(call.name).toBe("lookup")
      expect(call.params).toEqual({ query: "blue whales", limit: 3 })
      expect(call.id).toBe("call_0")
      expect(response.toolResults).toEqual([])
      expect(response.finishReason).toBe("tool-calls")
      expect(response.text).toBe("")
    }))

  it.effect("works through the LanguageModel tag and layer, like any provider", () =>
    Effect.gen(function*() {
      const response = yield* LanguageModel.generateText({
        prompt: "q",
        toolkit: toolkitWithFailingHandler,
        disableToolCallResolution: true
      })
      expect(response.toolCalls.map((call) => call.name)).toEqual(["lookup"])
    }).pipe(
      Effect.provide(
        Scripted.layer({ steps: [{ type: "tool_call", tool: "lookup", input: { query: "x", limit: 1 } }] })
      )
    ))

  it.effect("a tool_call for a tool not offered fails with MalformedOutput", () =>
    Effect.gen(function*() {
      const error = yield* generate([{ type: "tool_call", tool: "missing", input: {} }], "q").pipe(
        Effect.flip
      )
      expect(error._tag).toBe("MalformedOutput")
      expect(AiError.isAiError(error)).toBe(true)
      expect((error as AiError.MalformedOutput).description).toContain("'missing'")
    }))

  it.effect("fail step fails with an AiError carrying the message", () =>
    Effect.gen(function*() {
      const result = yield* generate(
        [{ type: "text", text: "ok" }, { type: "fail", message: "provider exploded" }],
        conversation(1, "again")
      ).pipe(Effect.either)
      expect(Either.isLeft(result)).toBe(true)
      const error = (result as Either.Left<AiError.AiError, unknown>).left
      expect(AiError.isAiError(error)).toBe(true)
      expect(error).toBeInstanceOf(AiError.UnknownError)
      expect((error as AiError.UnknownError).description).toBe("provider exploded")
      expect(error.message).toContain("provider exploded")
    }))

  it.effect("sleep step: the call completes only after the sleep, with the next step's output", () =>
    Effect.gen(function*() {
      const model = yield* Scripted.make({
        steps: [{ type: "sleep", seconds: 5 }, { type: "text", text: "woke up: {{input}}" }]
      })
      const fiber = yield* Effect.fork(model.generateText({ prompt: "ping" }))
      yield* TestClock.adjust("4 seconds")
      expect(yield* Fiber.poll(fiber)).toEqual(expect.objectContaining({ _tag: "None" }))
      yield* TestClock.adjust("1 second")
      const response = yield* Fiber.join(fiber)
      expect(response.text).toBe("woke up: ping")
      // The sleep belongs to the first call only; the repeated last step does not sleep again.
      const again = yield* model.generateText({ prompt: conversation(1, "pong") })
      expect(again.text).toBe("woke up: pong")
    }))

  it.effect("usage counts whitespace-separated words exactly", () =>
    Effect.gen(function*() {
      const prompt = Prompt.make([
        { role: "system", content: "Be  brief." },
        { role: "user", content: "one two\tthree\nfour" },
        { role: "assistant", content: "five six" },
        { role: "user", content: [{ type: "text", text: " seven " }, { type: "text", text: "eight nine" }] }
      ])
      const model = yield* Scripted.make({
        steps: [
          { type: "text", text: "unused" },
          { type: "text", text: "you said {{input}}" },
          { type: "tool_call", tool: "lookup", input: { query: "two words", limit: 1 } }
        ]
      })
      // input: 2 (system) + 4 + 2 + 1 + 2 = 11; output: "you said seven\neight nine" = 5
      const text = yield* model.generateText({ prompt })
      expect(text.usage.inputTokens).toBe(11)
      expect(text.usage.outputTokens).toBe(5)
      expect(text.usage.totalTokens).toBe(16)

      // Tool call output: JSON.stringify({query:"two words",limit:1}) = '{"query":"two words","limit":1}'
      // -> 2 words. Input: previous 11 + "you said seven eight nine"(5) + "next"(1) = 17.
      const toolPrompt = Prompt.make([
        ...prompt.content,
        { role: "assistant", content: [{ type: "text", text: "you said seven eight nine" }] },
        { role: "user", content: "next" }
      ])
      const call = yield* model.generateText({
        prompt: toolPrompt,
        toolkit: toolkitWithFailingHandler,
        disableToolCallResolution: true
      })
      expect(call.toolCalls).toHaveLength(1)
      expect(call.usage.inputTokens).toBe(17)
      expect(call.usage.outputTokens).toBe(2)
      expect(call.usage.totalTokens).toBe(19)
    }))

  it.effect("streamText emits the same content", () =>
    Effect.gen(function*() {
      const model = yield* Scripted.make({ steps: [{ type: "text", text: "streamed {{input}}" }] })
      const parts = yield* Stream.runCollect(model.streamText({ prompt: "words" }))
      const text = [...parts].flatMap((part) => part.type === "text-delta" ? [part.delta] : []).join("")
      expect(text).toBe("streamed words")
      const finish = [...parts].find((part) => part.type === "finish")
      expect(finish?.type === "finish" && finish.usage.outputTokens).toBe(2)
    }))

  it("settings schema refuses malformed steps", () => {
    const decode = Schema.decodeUnknownEither(ScriptedSettings)
    expect(Either.isRight(decode({ steps: [{ type: "text", text: "hi" }] }))).toBe(true)
    expect(Either.isRight(decode({ steps: [{ type: "sleep", seconds: 1 }, { type: "fail", message: "x" }] })))
      .toBe(true)
    expect(Either.isLeft(decode({ steps: [] }))).toBe(true)
    expect(Either.isLeft(decode({ steps: [{ type: "text" }] }))).toBe(true)
    expect(Either.isLeft(decode({ steps: [{ type: "sleep", seconds: -1 }, { type: "text", text: "x" }] })))
      .toBe(true)
    expect(Either.isLeft(decode({ steps: [{ type: "tool_call", tool: "", input: {} }] }))).toBe(true)
    expect(Either.isLeft(decode({ steps: [{ type: "text", text: "x" }, { type: "sleep", seconds: 1 }] })))
      .toBe(true)
    expect(Either.isLeft(decode({ steps: [{ type: "teleport" }] }))).toBe(true)
  })
})
