/**
 * The `openai_compatible` provider (D12): Chat Completions (`POST {base_url}/chat/completions`) at
 * a profile's `settings.base_url`, for vLLM, Ollama, llama.cpp, LiteLLM and the like, built with
 * `LanguageModel.make` so it is a LanguageModel like every other provider.
 *
 * It runs on @effect/ai-openai's `OpenAiClient` (built by the caller with `apiUrl` = base_url and
 * the optional credential: local servers often need none; when given it is sent as
 * `Authorization: Bearer`), and the request body is typed by the generated
 * `CreateChatCompletionRequest`. The response, however, is NOT decoded with the generated
 * `createChatCompletion`: its `CreateChatCompletionResponse` schema requires fields that OpenAI
 * sends but compatible servers omit (`choices[].message.refusal`, `choices[].logprobs`), and
 * admits only OpenAI's finish reasons, so it refuses real Ollama and llama.cpp answers. The body is
 * read through the same client's `httpClient` and decoded with the lenient `ChatCompletion`
 * schema below, which takes only what we use.
 *
 * Mapping:
 *   - prompt: system -> `{role:"system"}`; user text parts -> one `{role:"user", content}` (parts
 *     joined by newlines); assistant text + tool calls -> one `{role:"assistant", content (null
 *     without text), tool_calls:[{id, type:"function", function:{name, arguments: JSON}}]}`; each
 *     tool result -> `{role:"tool", tool_call_id, content}` (a string result as is, anything else
 *     as JSON). File parts are refused (`MalformedInput`).
 *   - tools: `{type:"function", function:{name, description?, parameters: <the tool's JSON Schema>}}`.
 *   - response: `choices[0].message.content` (or `refusal`) -> text; each `tool_calls[]` ->
 *     a tool-call part with `arguments` JSON-parsed (unparseable -> `MalformedOutput`); the
 *     finish reason; usage from `prompt_tokens` / `completion_tokens`; the response `id`.
 *   - HTTP: a non-2xx status is an `HttpResponseError` (status and headers kept); a body that is
 *     not JSON is an `HttpResponseError` with reason `Decode`; JSON of the wrong shape is
 *     `MalformedOutput`; a connection failure is an `HttpRequestError`.
 */
import { type Generated, OpenAiClient } from "@effect/ai-openai"
import * as AiError from "@effect/ai/AiError"
import * as IdGenerator from "@effect/ai/IdGenerator"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import * as Tool from "@effect/ai/Tool"
import { HttpClient, type HttpClientError, HttpClientRequest } from "@effect/platform"
import { Effect, Layer, type ParseResult, Schema, Stream } from "effect"

const MODULE = "OpenAiCompatibleLanguageModel"

export type ChatMessage = typeof Generated.ChatCompletionRequestMessage.Encoded
export type ChatRequest = typeof Generated.CreateChatCompletionRequest.Encoded
type ChatTool = typeof Generated.ChatCompletionTool.Encoded
type ChatToolCall = typeof Generated.ChatCompletionMessageToolCall.Encoded

// -----------------------------------------------------------------------------
// Request
// -----------------------------------------------------------------------------

const jsonText = (value: unknown): string => JSON.stringify(value) ?? "null"

/** The prompt as Chat Completions messages. */
export const toMessages = (
  prompt: Prompt.Prompt,
  method = "toMessages"
): Effect.Effect<Array<ChatMessage>, AiError.MalformedInput> =>
  Effect.gen(function*() {
    const messages: Array<ChatMessage> = []
    for (const message of prompt.content) {
      switch (message.role) {
        case "system":
          messages.push({ role: "system", content: message.content })
          break
        case "user": {
          const texts: Array<string> = []
          for (const part of message.content) {
            if (part.type === "text") texts.push(part.text)
            else {
              return yield* new AiError.MalformedInput({
                module: MODULE,
                method,
                description: `Chat Completions messages here carry text only (got a '${part.type}' part)`
              })
            }
          }
          messages.push({ role: "user", content: texts.join("\n") })
          break
        }
        case "assistant": {
          const texts: Array<string> = []
          const calls: Array<ChatToolCall> = []
          for (const part of message.content) {
            if (part.type === "text") texts.push(part.text)
            else if (part.type === "tool-call" && !part.providerExecuted) {
              calls.push({ id: part.id, type: "function", function: { name: part.name, arguments: jsonText(part.params ?? {}) } })
            }
            // Reasoning, files and provider-executed results have no Chat Completions form: dropped.
          }
          const text = texts.join("\n")
          messages.push({
            role: "assistant",
            content: text === "" ? null : text,
            ...(calls.length > 0 ? { tool_calls: calls } : {})
          })
          break
        }
        case "tool":
          for (const part of message.content) {
            messages.push({
              role: "tool",
              tool_call_id: part.id,
              content: typeof part.result === "string" ? part.result : jsonText(part.result)
            })
          }
          break
      }
    }
    return messages
  })

/** The toolkit's user-defined tools as Chat Completions function tools. */
export const toTools = (tools: ReadonlyArray<Tool.Any>): Array<ChatTool> =>
  tools.flatMap((tool): Array<ChatTool> => {
    if (!Tool.isUserDefined(tool)) return []
    const description = Tool.getDescription(tool as any)
    return [{
      type: "function",
      function: {
        name: tool.name,
        ...(description === undefined ? {} : { description }),
        parameters: Tool.getJsonSchema(tool as any) as unknown as Record<string, unknown>
      }
    }]
  })

const toToolChoice = (choice: LanguageModel.ToolChoice<any>): ChatRequest["tool_choice"] => {
  if (choice === "auto") return undefined
  if (choice === "none" || choice === "required") return choice
  if ("tool" in choice) return { type: "function", function: { name: choice.tool } }
  // `oneOf`: the library already narrowed the offered tools to the allowed ones.
  return choice.mode === "required" ? "required" : undefined
}

// -----------------------------------------------------------------------------
// Response
// -----------------------------------------------------------------------------

const OptionalString = Schema.optional(Schema.NullOr(Schema.String))
const OptionalNumber = Schema.optional(Schema.NullOr(Schema.Number))

/** What compatible servers send (only what we use; everything else is ignored). */
export const ChatCompletion = Schema.Struct({
  id: OptionalString,
  model: OptionalString,
  choices: Schema.Array(Schema.Struct({
    finish_reason: OptionalString,
    message: Schema.Struct({
      content: OptionalString,
      refusal: OptionalString,
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
        id: OptionalString,
        type: OptionalString,
        function: Schema.Struct({
          name: Schema.String,
          // A JSON text per the spec; some servers send the object itself.
          arguments: Schema.optional(
            Schema.NullOr(Schema.Union(Schema.String, Schema.Record({ key: Schema.String, value: Schema.Unknown })))
          )
        })
      }))))
    })
  })),
  usage: Schema.optional(Schema.NullOr(Schema.Struct({ prompt_tokens: OptionalNumber, completion_tokens: OptionalNumber })))
})
export type ChatCompletion = typeof ChatCompletion.Type

export const finishReason = (reason: string | null | undefined): Response.FinishReason => {
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

/** The parts of a decoded completion. */
const toParts = (
  completion: ChatCompletion,
  model: string,
  method: string
): Effect.Effect<Array<Response.PartEncoded>, AiError.MalformedOutput, IdGenerator.IdGenerator> =>
  Effect.gen(function*() {
    const choice = completion.choices[0]
    if (choice === undefined) {
      return yield* new AiError.MalformedOutput({ module: MODULE, method, description: "The response has no choices" })
    }
    const parts: Array<Response.PartEncoded> = [{
      type: "response-metadata",
      ...(completion.id ? { id: completion.id } : {}),
      modelId: completion.model || model
    }]
    const text = choice.message.content ?? choice.message.refusal
    if (text) parts.push({ type: "text", text })
    const idGenerator = yield* IdGenerator.IdGenerator
    let calls = 0
    for (const call of choice.message.tool_calls ?? []) {
      if (call.type && call.type !== "function") continue
      const raw = call.function.arguments
      let params: unknown
      if (raw === undefined || raw === null || (typeof raw === "string" && raw.trim() === "")) {
        params = {}
      } else if (typeof raw !== "string") {
        params = raw
      } else {
        try {
          params = Tool.unsafeSecureJsonParse(raw)
        } catch {
          return yield* new AiError.MalformedOutput({
            module: MODULE,
            method,
            description: `The arguments of the call to tool '${call.function.name}' are not valid JSON`
          })
        }
      }
      parts.push({ type: "tool-call", id: call.id || (yield* idGenerator.generateId()), name: call.function.name, params })
      calls++
    }
    const inputTokens = completion.usage?.prompt_tokens ?? 0
    const outputTokens = completion.usage?.completion_tokens ?? 0
    const reason = finishReason(choice.finish_reason)
    parts.push({
      type: "finish",
      reason: calls > 0 && (reason === "stop" || reason === "unknown") ? "tool-calls" : reason,
      usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }
    })
    return parts
  })

const toAiError = (method: string) =>
(
  error: HttpClientError.HttpClientError | ParseResult.ParseError
): Effect.Effect<never, AiError.AiError> => {
  switch (error._tag) {
    case "ParseError":
      return Effect.fail(AiError.MalformedOutput.fromParseError({ module: MODULE, method, error }))
    case "ResponseError":
      return AiError.HttpResponseError.fromResponseError({ module: MODULE, method, error })
    case "RequestError":
      return Effect.fail(AiError.HttpRequestError.fromRequestError({ module: MODULE, method, error }))
  }
}

// -----------------------------------------------------------------------------
// The model
// -----------------------------------------------------------------------------

/** One Chat Completions call for `options`, as response parts. */
const generate = (
  client: OpenAiClient.Service,
  model: string,
  options: LanguageModel.ProviderOptions,
  method: string
): Effect.Effect<Array<Response.PartEncoded>, AiError.AiError, IdGenerator.IdGenerator> =>
  Effect.gen(function*() {
    const messages = yield* toMessages(options.prompt, method)
    const tools = toTools(options.tools)
    const toolChoice = tools.length > 0 ? toToolChoice(options.toolChoice) : undefined
    const body: ChatRequest = {
      model,
      messages: messages as unknown as ChatRequest["messages"],
      ...(tools.length > 0 ? { tools } : {}),
      ...(toolChoice === undefined ? {} : { tool_choice: toolChoice })
    }
    options.span.attribute("gen_ai.system", "openai_compatible")
    options.span.attribute("gen_ai.request.model", model)
    const completion = yield* HttpClientRequest.post("/chat/completions").pipe(
      HttpClientRequest.bodyUnsafeJson(body),
      HttpClient.filterStatusOk(client.client.httpClient).execute,
      Effect.flatMap((response) => response.json),
      Effect.flatMap(Schema.decodeUnknown(ChatCompletion)),
      Effect.catchAll(toAiError(method))
    )
    return yield* toParts(completion, model, method)
  })

/** A complete response as the equivalent stream parts (one text delta per text part). */
const toStreamParts = (parts: ReadonlyArray<Response.PartEncoded>): Array<Response.StreamPartEncoded> =>
  parts.flatMap((part, i): Array<Response.StreamPartEncoded> => {
    if (part.type !== "text") return [part as Response.StreamPartEncoded]
    const id = `text_${i}`
    return [{ type: "text-start", id }, { type: "text-delta", id, delta: part.text }, { type: "text-end", id }]
  })

/**
 * The model `model` of the server the `OpenAiClient` in context points at, as a
 * `LanguageModel.Service`. Build the client with `OpenAiClient.layer({apiUrl: base_url, apiKey?})`.
 * `streamText` makes the same single (non-streaming) call and replays its parts as a stream.
 */
export const make = (options: { readonly model: string }): Effect.Effect<LanguageModel.Service, never, OpenAiClient.OpenAiClient> =>
  Effect.gen(function*() {
    const client = yield* OpenAiClient.OpenAiClient
    return yield* LanguageModel.make({
      generateText: (o) => generate(client, options.model, o, "generateText"),
      streamText: (o) =>
        generate(client, options.model, o, "streamText").pipe(
          Effect.map((parts) => Stream.fromIterable(toStreamParts(parts))),
          Stream.unwrap
        )
    })
  })

/** A layer providing `LanguageModel.LanguageModel` backed by the compatible server. */
export const layer = (options: { readonly model: string }): Layer.Layer<LanguageModel.LanguageModel, never, OpenAiClient.OpenAiClient> =>
  Layer.effect(LanguageModel.LanguageModel, make(options))
