/**
 * The `openai_compatible` provider (D12): Chat Completions at a profile's `settings.base_url`, for
 * vLLM, Ollama, llama.cpp, LiteLLM and the like, built with `LanguageModel.make` so it is a
 * LanguageModel like every other provider. The credential is optional (local servers often need
 * none). The call goes through @effect/platform's HttpClient with a lenient response schema rather
 * than @effect/ai-openai's generated `createChatCompletion`: that decoder requires fields OpenAI
 * sends but compatible servers often omit (`message.refusal`, `choices[].logprobs`), so it would
 * refuse real Ollama and llama.cpp answers.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import { FetchHttpClient, HttpClient, HttpClientRequest, type HttpClientError } from "@effect/platform"
import { Effect, type ParseResult, Redacted, Schema, Stream } from "effect"

const MODULE = "OpenAiCompatibleLanguageModel"

type ChatMessage = Record<string, unknown>

/** The prompt as Chat Completions messages. */
export const toMessages = (prompt: Prompt.Prompt): Array<ChatMessage> =>
  prompt.content.flatMap((message): Array<ChatMessage> => {
    switch (message.role) {
      case "system":
        return [{ role: "system", content: message.content }]
      case "user":
        return [{
          role: "user",
          content: message.content.flatMap((p) => (p.type === "text" ? [p.text] : [])).join("\n")
        }]
      case "assistant": {
        const text = message.content.flatMap((p) => (p.type === "text" ? [p.text] : [])).join("\n")
        const calls = message.content.flatMap((p) =>
          p.type === "tool-call"
            ? [{ id: p.id, type: "function", function: { name: p.name, arguments: JSON.stringify(p.params ?? {}) } }]
            : []
        )
        return [{ role: "assistant", content: text === "" ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) }]
      }
      case "tool":
        return message.content.map((p) => ({
          role: "tool",
          tool_call_id: p.id,
          content: typeof p.result === "string" ? p.result : JSON.stringify(p.result)
        }))
    }
  })

const finishReason = (reason: string | null | undefined): Response.FinishReason => {
  switch (reason) {
    case "stop":
      return "stop"
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      return "tool-calls"
    case "content_filter":
      return "content-filter"
    default:
      return "unknown"
  }
}

const toAiError = (method: string) =>
(error: HttpClientError.HttpClientError | ParseResult.ParseError): Effect.Effect<never, AiError.AiError> => {
  if (error._tag === "ParseError") return Effect.fail(AiError.MalformedOutput.fromParseError({ module: MODULE, method, error }))
  if (error._tag === "ResponseError") return AiError.HttpResponseError.fromResponseError({ module: MODULE, method, error })
  // A body that is not JSON at all.
  return Effect.fail(AiError.HttpRequestError.fromRequestError({ module: MODULE, method, error }))
}

/** What compatible servers send (only what we use; everything else is ignored). */
const ChatCompletion = Schema.Struct({
  id: Schema.optionalWith(Schema.String, { default: () => "" }),
  model: Schema.optionalWith(Schema.String, { default: () => "" }),
  choices: Schema.Array(Schema.Struct({
    finish_reason: Schema.optional(Schema.NullOr(Schema.String)),
    message: Schema.Struct({
      content: Schema.optional(Schema.NullOr(Schema.String)),
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
        id: Schema.String,
        type: Schema.optional(Schema.String),
        function: Schema.Struct({ name: Schema.String, arguments: Schema.optional(Schema.NullOr(Schema.String)) })
      }))))
    })
  })),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({
    prompt_tokens: Schema.optional(Schema.Number),
    completion_tokens: Schema.optional(Schema.Number)
  })))
})

interface Target {
  readonly http: HttpClient.HttpClient
  readonly baseUrl: string
  readonly model: string
  readonly apiKey?: Redacted.Redacted | undefined
}

const generate = (target: Target, options: LanguageModel.ProviderOptions, method: string) =>
  Effect.gen(function*() {
    const tools = options.tools.map((tool) => ({
      type: "function" as const,
      function: {
        name: tool.name,
        ...(Tool.getDescription(tool as any) ? { description: Tool.getDescription(tool as any) } : {}),
        parameters: Tool.getJsonSchema(tool as any)
      }
    }))
    let request = HttpClientRequest.post(`${target.baseUrl}/chat/completions`).pipe(
      HttpClientRequest.bodyUnsafeJson({
        model: target.model,
        messages: toMessages(options.prompt),
        ...(tools.length > 0 ? { tools } : {})
      })
    )
    if (target.apiKey) request = HttpClientRequest.bearerToken(request, Redacted.value(target.apiKey))
    const response = yield* target.http.execute(request).pipe(
      Effect.flatMap((res) => res.json),
      Effect.flatMap(Schema.decodeUnknown(ChatCompletion)),
      Effect.catchAll(toAiError(method))
    )
    const choice = response.choices[0]
    if (!choice) {
      return yield* new AiError.MalformedOutput({ module: MODULE, method, description: "The response has no choices" })
    }
    const parts: Array<Response.PartEncoded> = [{ type: "response-metadata", id: response.id, modelId: response.model || target.model }]
    if (choice.message.content) parts.push({ type: "text", text: choice.message.content })
    for (const call of choice.message.tool_calls ?? []) {
      if (call.type !== undefined && call.type !== "function") continue
      let params: unknown
      try {
        params = JSON.parse(call.function.arguments || "{}")
      } catch {
        return yield* new AiError.MalformedOutput({
          module: MODULE,
          method,
          description: `The arguments of tool call ${call.id} are not JSON`
        })
      }
      parts.push({ type: "tool-call", id: call.id, name: call.function.name, params })
    }
    const inputTokens = response.usage?.prompt_tokens ?? 0
    const outputTokens = response.usage?.completion_tokens ?? 0
    parts.push({
      type: "finish",
      reason: finishReason(choice.finish_reason),
      usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }
    })
    return parts
  })

/** The model of `settings.base_url` as a `LanguageModel.Service`. */
export const make = (options: { readonly baseUrl: string; readonly model: string; readonly apiKey?: Redacted.Redacted | undefined }) =>
  Effect.gen(function*() {
    const http = (yield* HttpClient.HttpClient).pipe(HttpClient.filterStatusOk)
    const target: Target = { http, baseUrl: options.baseUrl.replace(/\/+$/, ""), model: options.model, apiKey: options.apiKey }
    return yield* LanguageModel.make({
      generateText: (o) => generate(target, o, "generateText"),
      streamText: (o) =>
        generate(target, o, "streamText").pipe(
          Effect.map((parts) =>
            Stream.fromIterable(parts.flatMap((part, i): Array<Response.StreamPartEncoded> =>
              part.type === "text"
                ? [
                  { type: "text-start", id: `text_${i}` },
                  { type: "text-delta", id: `text_${i}`, delta: part.text },
                  { type: "text-end", id: `text_${i}` }
                ]
                : [part as Response.StreamPartEncoded]
            ))
          ),
          Stream.unwrap
        )
    })
  }).pipe(Effect.provide(FetchHttpClient.layer))
