/**
 * The agent step engine (issue 3 part 3): given a revision's instructions, its model profile, its
 * tool definitions and the conversation so far, one step calls the model once and returns either
 * final content or proposed tool calls, unexecuted (`disableToolCallResolution`), with usage. It
 * owns no durability: the run actor persists each step and decides what happens to tool calls.
 *
 * Providers are @effect/ai `LanguageModel`s: `openai` (Responses API, @effect/ai-openai),
 * `anthropic` (Messages API, @effect/ai-anthropic), `openai_compatible` (Chat Completions at the
 * profile's `settings.base_url`, src/Models/OpenAiCompatible.ts) and `scripted`
 * (src/Models/Scripted.ts). Their
 * base URLs are operator config (OPENAI_BASE_URL, ANTHROPIC_BASE_URL). Provider failures become
 * typed errors that keep the provider's request id. Credentials stay `Redacted` until the client
 * layer and never appear in errors.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { AnthropicClient, AnthropicLanguageModel } from "@effect/ai-anthropic"
import { OpenAiClient, OpenAiLanguageModel } from "@effect/ai-openai"
import { FetchHttpClient } from "@effect/platform"
import { Config, Duration, Effect, Layer, Option, type Redacted, Schema } from "effect"
import { ScriptedSettings } from "../Domain/Agents.js"
import * as OpenAiCompatible from "./OpenAiCompatible.js"
import * as Scripted from "./Scripted.js"

// ---------------------------------------------------------------------------------------------
// The conversation the agent sees (persisted by the run actor as JSON)

export const UserMessage = Schema.Struct({ type: Schema.Literal("user_message"), text: Schema.String })
export const AssistantMessage = Schema.Struct({ type: Schema.Literal("assistant_message"), text: Schema.String })
export const ToolCallItem = Schema.Struct({
  type: Schema.Literal("tool_call"),
  call_id: Schema.String,
  name: Schema.String,
  input: Schema.Unknown
})
export const ToolResultItem = Schema.Struct({
  type: Schema.Literal("tool_result"),
  call_id: Schema.String,
  name: Schema.String,
  output: Schema.Unknown,
  is_error: Schema.Boolean
})
export const ConversationItem = Schema.Union(UserMessage, AssistantMessage, ToolCallItem, ToolResultItem)
export type ConversationItem = typeof ConversationItem.Type

export interface Usage {
  readonly input_tokens: number
  readonly output_tokens: number
  readonly model_calls: number
}

export interface ProposedCall {
  readonly call_id: string
  readonly name: string
  readonly input: unknown
}

export type StepResult =
  | { readonly _tag: "Final"; readonly text: string; readonly usage: Usage; readonly provider_request_id?: string }
  | {
    readonly _tag: "ToolCalls"
    readonly calls: ReadonlyArray<ProposedCall>
    readonly text: string
    readonly usage: Usage
    readonly provider_request_id?: string
  }

/** A tool the agent may call: its name, description and the JSON Schema of its input. */
export interface ToolDefinition {
  readonly name: string
  readonly description?: string | undefined
  readonly input_schema: Record<string, unknown>
}

export interface StepInput {
  readonly profile: { readonly id: string; readonly provider: string; readonly model: string; readonly settings: Record<string, unknown> }
  readonly credential: Option.Option<Redacted.Redacted<string>>
  readonly instructions: string
  readonly tools?: ReadonlyArray<ToolDefinition> | undefined
  readonly conversation: ReadonlyArray<ConversationItem>
}

/**
 * The tools as an @effect/ai toolkit. Parameters are decoded permissively (any JSON object; the
 * customer's schema is enforced where the tool is executed), while the JSON Schema sent to the
 * provider is the customer's own (`jsonSchema` annotation). Handlers are required by the library
 * but never run: calls are returned unexecuted.
 */
const toolkitOf = (tools: ReadonlyArray<ToolDefinition>) => {
  const defined = tools.map((t) =>
    Tool.make(t.name, { description: t.description, success: Schema.Unknown }).setParameters(
      Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({ jsonSchema: t.input_schema })
    )
  )
  const toolkit = Toolkit.make(...(defined as Array<any>))
  const handlers = toolkit.toLayer(
    Object.fromEntries(tools.map((t) => [t.name, () => Effect.dieMessage("tool calls are returned to the run, not executed here")]))
  )
  return { toolkit, handlers }
}

// ---------------------------------------------------------------------------------------------
// Typed failures

const failureFields = {
  provider: Schema.String,
  message: Schema.String,
  provider_request_id: Schema.optional(Schema.String),
  retry_after_seconds: Schema.optional(Schema.Number)
}
export class ModelRateLimited extends Schema.TaggedError<ModelRateLimited>()("ModelRateLimited", failureFields) {}
export class ModelUnavailable extends Schema.TaggedError<ModelUnavailable>()("ModelUnavailable", failureFields) {}
export class ModelInvalidResponse extends Schema.TaggedError<ModelInvalidResponse>()("ModelInvalidResponse", failureFields) {}
export class ModelAuthFailed extends Schema.TaggedError<ModelAuthFailed>()("ModelAuthFailed", failureFields) {}
export class ModelFailed extends Schema.TaggedError<ModelFailed>()("ModelFailed", failureFields) {}
export type ModelError = ModelRateLimited | ModelUnavailable | ModelInvalidResponse | ModelAuthFailed | ModelFailed

const requestIdOf = (headers: Record<string, string>) => headers["x-request-id"] ?? headers["request-id"]

/** Maps an @effect/ai failure to a typed model error (without any credential in it). */
export const toModelError = (provider: string, error: AiError.AiError): ModelError => {
  switch (error._tag) {
    case "HttpResponseError": {
      const status = error.response.status
      const headers = error.response.headers
      const id = requestIdOf(headers)
      const base = { provider, message: `${provider} answered HTTP ${status}`, ...(id ? { provider_request_id: id } : {}) }
      if (status === 429) {
        const retry = Number(headers["retry-after"])
        return new ModelRateLimited({ ...base, ...(Number.isFinite(retry) ? { retry_after_seconds: retry } : {}) })
      }
      if (status === 401 || status === 403) return new ModelAuthFailed(base)
      if (status >= 500) return new ModelUnavailable(base)
      if (error.reason === "Decode") return new ModelInvalidResponse({ ...base, message: `${provider} sent a response that could not be read` })
      return new ModelFailed(base)
    }
    case "HttpRequestError":
      return new ModelUnavailable({ provider, message: `${provider} could not be reached (${error.reason})` })
    case "MalformedOutput":
      return new ModelInvalidResponse({ provider, message: error.description ?? `${provider} sent a malformed response` })
    case "MalformedInput":
      return new ModelFailed({ provider, message: error.description ?? "the request to the model was malformed" })
    case "UnknownError":
      return new ModelFailed({ provider, message: error.description ?? `${provider} call failed` })
  }
}

// ---------------------------------------------------------------------------------------------
// Operator config of the providers

export class ModelsConfig extends Effect.Service<ModelsConfig>()("ModelsConfig", {
  effect: Effect.gen(function*() {
    return yield* Config.all({
      openaiBaseUrl: Config.string("OPENAI_BASE_URL").pipe(Config.withDefault("https://api.openai.com/v1")),
      anthropicBaseUrl: Config.string("ANTHROPIC_BASE_URL").pipe(Config.withDefault("https://api.anthropic.com")),
      requestTimeoutSeconds: Config.integer("MODEL_REQUEST_TIMEOUT_SECONDS").pipe(
        Config.withDefault(120),
        Config.validate({ message: "MODEL_REQUEST_TIMEOUT_SECONDS must be at least 1", validation: (n) => n >= 1 })
      )
    })
  })
}) {}

// ---------------------------------------------------------------------------------------------
// The prompt

/** The conversation as an @effect/ai prompt, the instructions as its system message. */
export const toPrompt = (instructions: string, items: ReadonlyArray<ConversationItem>): Prompt.Prompt => {
  const messages: Array<Prompt.MessageEncoded> = []
  if (instructions.trim() !== "") messages.push({ role: "system", content: instructions })
  for (const item of items) {
    switch (item.type) {
      case "user_message":
        messages.push({ role: "user", content: [{ type: "text", text: item.text }] })
        break
      case "assistant_message":
        messages.push({ role: "assistant", content: [{ type: "text", text: item.text }] })
        break
      case "tool_call":
        messages.push({ role: "assistant", content: [{ type: "tool-call", id: item.call_id, name: item.name, params: item.input, providerExecuted: false }] })
        break
      case "tool_result":
        messages.push({ role: "tool", content: [{ type: "tool-result", id: item.call_id, name: item.name, result: item.output, isFailure: item.is_error, providerExecuted: false }] })
        break
    }
  }
  return Prompt.fromMessages(Schema.decodeUnknownSync(Schema.Array(Prompt.Message))(messages))
}

// ---------------------------------------------------------------------------------------------
// The engine

export class StepEngine extends Effect.Service<StepEngine>()("StepEngine", {
  effect: Effect.gen(function*() {
    const config = yield* ModelsConfig

    /** The profile's LanguageModel, or a typed error when it cannot be built. */
    const modelOf = (input: StepInput): Effect.Effect<LanguageModel.Service, ModelError> => {
      const { provider, model, settings } = input.profile
      const needKey = () =>
        Option.match(input.credential, {
          onNone: () => Effect.fail(new ModelAuthFailed({ provider, message: `The model profile has no ${provider} credential` })),
          onSome: Effect.succeed
        })
      switch (provider) {
        case "scripted":
          return Effect.flatMap(
            Effect.mapError(Schema.decodeUnknown(ScriptedSettings)(settings), () =>
              new ModelFailed({ provider, message: "The scripted profile's steps are invalid" })),
            Scripted.make
          )
        case "openai":
          return Effect.flatMap(needKey(), (apiKey) =>
            OpenAiLanguageModel.make({ model }).pipe(
              Effect.provide(OpenAiClient.layer({ apiKey, apiUrl: config.openaiBaseUrl }).pipe(Layer.provide(FetchHttpClient.layer)))
            ))
        case "anthropic":
          return Effect.flatMap(needKey(), (apiKey) =>
            AnthropicLanguageModel.make({ model, config: { max_tokens: Number(settings.max_tokens ?? 4096) } }).pipe(
              Effect.provide(AnthropicClient.layer({ apiKey, apiUrl: config.anthropicBaseUrl }).pipe(Layer.provide(FetchHttpClient.layer)))
            ))
        case "openai_compatible":
          return OpenAiCompatible.make({
            baseUrl: String(settings.base_url ?? ""),
            model,
            apiKey: Option.getOrUndefined(input.credential)
          })
        default:
          return Effect.fail(new ModelUnavailable({ provider, message: `Unknown provider ${provider}` }))
      }
    }

    /** One model call; proposed tool calls are returned, never executed. */
    const step = (input: StepInput): Effect.Effect<StepResult, ModelError> =>
      Effect.gen(function*() {
        const provider = input.profile.provider
        const model = yield* modelOf(input)
        const prompt = toPrompt(input.instructions, input.conversation)
        const tools = input.tools ?? []
        const generated: Effect.Effect<LanguageModel.GenerateTextResponse<any>, AiError.AiError> = tools.length === 0
          ? model.generateText({ prompt, disableToolCallResolution: true })
          : Effect.suspend(() => {
            const { handlers, toolkit } = toolkitOf(tools)
            return Effect.provide(model.generateText({ prompt, toolkit, disableToolCallResolution: true }) as any, handlers) as any
          })
        const response = yield* generated.pipe(
          Effect.mapError((e) => toModelError(provider, e)),
          // The scripted model's sleeps are deliberate (and bounded by the run's budgets).
          provider === "scripted" ? (x) => x : Effect.timeoutFail({
            duration: Duration.seconds(config.requestTimeoutSeconds),
            onTimeout: () => new ModelUnavailable({ provider, message: `${provider} did not answer within ${config.requestTimeoutSeconds} s` })
          })
        )
        const usage: Usage = {
          input_tokens: response.usage.inputTokens ?? 0,
          output_tokens: response.usage.outputTokens ?? 0,
          model_calls: 1
        }
        const metadata = response.content.find((p) => p.type === "response-metadata")
        const requestId = metadata && "id" in metadata && typeof metadata.id === "string" ? { provider_request_id: metadata.id } : {}
        const calls: Array<ProposedCall> = []
        for (const part of response.content as unknown as ReadonlyArray<{ type: string; id: string; name: string; params: unknown }>) {
          if (part.type === "tool-call") calls.push({ call_id: part.id, name: part.name, input: part.params })
        }
        return calls.length > 0
          ? { _tag: "ToolCalls" as const, calls, text: response.text, usage, ...requestId }
          : { _tag: "Final" as const, text: response.text, usage, ...requestId }
      }).pipe(Effect.withSpan("StepEngine.step", { attributes: { provider: input.profile.provider, model: input.profile.model } }))

    return { step } as const
  }),
  dependencies: [ModelsConfig.Default]
}) {}
