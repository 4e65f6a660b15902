/**
 * What the step engine shares with every provider: the ModelsConfig environment (defaults and
 * refusals), the prompt built from a conversation, and step results and model errors surviving a
 * JSON round trip through their schemas.
 */
import * as Prompt from "@effect/ai/Prompt"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Schema } from "effect"
import { StepResult } from "../src/Domain/Conversation.js"
import { ModelsConfig } from "../src/Models/Config.js"
import { ModelError } from "../src/Models/Errors.js"
import { literals, toPrompt } from "../src/Models/Prompt.js"

describe("step engine: prompt, schemas and config", () => {
  it.effect("ModelsConfig reads the environment, with defaults, and refuses bad values", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.withConfigProvider(ModelsConfig.config, ConfigProvider.fromMap(new Map(Object.entries(env))))
      expect(yield* read({})).toEqual(ModelsConfig.defaults())
      expect(ModelsConfig.defaults()).toEqual({
        openaiBaseUrl: "https://api.openai.com/v1",
        anthropicBaseUrl: "https://api.anthropic.com",
        requestTimeoutSeconds: 120,
        responseMaxBytes: 10 * 1024 * 1024
      })
      expect(
        yield* read({
          OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
          ANTHROPIC_BASE_URL: "https://proxy.internal",
          MODEL_REQUEST_TIMEOUT_SECONDS: "30",
          MODEL_RESPONSE_MAX_BYTES: "1048576"
        })
      ).toEqual({
        openaiBaseUrl: "http://127.0.0.1:9/v1",
        anthropicBaseUrl: "https://proxy.internal",
        requestTimeoutSeconds: 30,
        responseMaxBytes: 1_048_576
      })
      for (
        const bad of [
          { OPENAI_BASE_URL: "not a url" },
          { ANTHROPIC_BASE_URL: "ftp://x" },
          { MODEL_REQUEST_TIMEOUT_SECONDS: "0" },
          { MODEL_RESPONSE_MAX_BYTES: "100" }
        ]
      ) {
        expect(Exit.isFailure(yield* Effect.exit(read(bad)))).toBe(true)
      }
    }))

  it("toPrompt groups an assistant's text and calls into one message and consecutive results into one", () => {
    const prompt = toPrompt("Be brief.", [
      { type: "user_message", text: "q" },
      { type: "assistant_message", text: "Checking." },
      { type: "tool_call", call_id: "a", name: "t", input: { x: 1 } },
      { type: "tool_call", call_id: "b", name: "t", input: { x: 2 } },
      { type: "tool_result", call_id: "a", name: "t", output: 1, is_error: false },
      { type: "tool_result", call_id: "b", name: "t", output: "boom", is_error: true },
      { type: "assistant_message", text: "Done." },
      { type: "user_message", text: "thanks" }
    ])
    expect(Prompt.isPrompt(prompt)).toBe(true)
    const shape = prompt.content.map((m) => m.role === "system" ? ["system", m.content] : [m.role, m.content.map((p) => p.type)])
    expect(shape).toEqual([
      ["system", "Be brief."],
      ["user", ["text"]],
      ["assistant", ["text", "tool-call", "tool-call"]],
      ["tool", ["tool-result", "tool-result"]],
      ["assistant", ["text"]],
      ["user", ["text"]]
    ])
    const results = prompt.content[3]!
    expect(results.role === "tool" && results.content.map((p) => [p.id, p.result, p.isFailure])).toEqual([
      ["a", 1, false],
      ["b", "boom", true]
    ])
    // Empty instructions: no system message.
    expect(toPrompt("  ", [{ type: "user_message", text: "q" }]).content.map((m) => m.role)).toEqual(["user"])
  })

  it("the prompt's parts and messages are what Prompt.makePart and makeMessage make", () => {
    const bytes = new Uint8Array([1, 2, 3])
    const text = Prompt.makePart("text", { text: "t" })
    const call = Prompt.makePart("tool-call", { id: "c", name: "n", params: { x: 1 }, providerExecuted: false })
    const result = Prompt.makePart("tool-result", { id: "c", name: "n", result: [1], isFailure: true, providerExecuted: false })
    const file = Prompt.makePart("file", { mediaType: "image/png", fileName: "a.png", data: bytes })
    const pairs: Array<[unknown, unknown]> = [
      [literals.textPart("t"), text],
      [literals.toolCallPart("c", "n", { x: 1 }), call],
      [literals.toolResultPart("c", "n", [1], true), result],
      [literals.filePart("image/png", "a.png", bytes), file],
      [literals.systemMessage("s"), Prompt.makeMessage("system", { content: "s" })],
      [literals.userMessage([text, file]), Prompt.makeMessage("user", { content: [text, file] })],
      [literals.assistantMessage([text, call]), Prompt.makeMessage("assistant", { content: [text, call] })],
      [literals.toolMessage([result]), Prompt.makeMessage("tool", { content: [result] })]
    ]
    for (const [ours, library] of pairs) {
      expect(ours).toStrictEqual(library)
      expect(Object.keys(ours as object).sort()).toEqual(Object.keys(library as object).sort())
    }
    expect(Prompt.isPart(literals.textPart("t"))).toBe(true)
    expect(Prompt.isMessage(literals.systemMessage("s"))).toBe(true)
  })

  it("step results and model errors survive a JSON round trip through their schemas", () => {
    const roundTrip = <A, I>(schema: Schema.Schema<A, I>, value: A) =>
      Schema.decodeUnknownSync(schema)(JSON.parse(JSON.stringify(Schema.encodeSync(schema)(value))))
    const results: ReadonlyArray<StepResult> = [
      { _tag: "Final", text: "hi", usage: { input_tokens: 1, output_tokens: 2, model_calls: 1 }, provider_request_id: "req_1" },
      {
        _tag: "ToolCalls",
        calls: [{ call_id: "c", name: "t", input: { nested: [1, { a: null }] } }],
        usage: { input_tokens: 0, output_tokens: 0, model_calls: 1 }
      }
    ]
    for (const result of results) expect(roundTrip(StepResult, result)).toEqual(result)
    const error = Schema.decodeUnknownSync(ModelError)({
      _tag: "ModelRateLimited",
      provider: "openai",
      message: "slow down",
      provider_request_id: "req_x",
      retry_after_seconds: 3
    })
    expect(error._tag).toBe("ModelRateLimited")
    expect(roundTrip(ModelError, error)).toEqual(error)
  })
})
