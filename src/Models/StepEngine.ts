/**
 * The agent step engine (issue 3 part 3): given a revision's instructions, its model profile, its
 * tool definitions and the conversation so far, one step calls the model exactly once and returns
 * either final text or the proposed tool calls, unexecuted (`disableToolCallResolution`), with
 * usage. It owns no durability: the run actor persists each step (the schemas below are
 * JSON-serialisable for that) and decides what happens to tool calls.
 *
 * Providers are @effect/ai `LanguageModel`s, built per step for the step's profile:
 *   - `openai`: the Responses API (`OpenAiLanguageModel`, `POST {OPENAI_BASE_URL}/responses`);
 *     credential required, sent as `Authorization: Bearer`. Tools are sent with `strict: false`
 *     (customer schemas rarely meet strict mode's rules) and responses with `store: false`.
 *   - `anthropic`: the Messages API (`AnthropicLanguageModel`, `POST {ANTHROPIC_BASE_URL}/v1/messages`);
 *     credential required, sent as `x-api-key`. `max_tokens` is `settings.max_tokens` (a positive
 *     integer) or 4096.
 *   - `openai_compatible`: Chat Completions at the profile's `settings.base_url`
 *     (src/Models/OpenAiCompatible.ts); the credential is optional (Bearer when given). The URL is
 *     the customer's, so its requests go through the destination guard's dispatcher (D10: public
 *     https only unless `DESTINATION_ALLOWLIST` admits it, checked on the connected address).
 *   - `scripted`: src/Models/Scripted.ts; no HTTP, sleeps on Effect's `Clock` (so TestClock drives
 *     them) and no request timeout.
 *
 * Failures become the typed errors below (see `toModelError`), carrying the provider's request id
 * (`x-request-id` / `request-id` response header) when there is one. A success carries the same
 * header id, or else the response's own id, as `provider_request_id`.
 *
 * Credentials stay `Redacted` until the client layer puts them in a request header; both header
 * names (`authorization`, `x-api-key`) are redacted by @effect/platform in spans and errors, and
 * every error message is built here (never copied from a library error that could echo a request)
 * and scrubbed of the credential's value besides.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { AnthropicClient, AnthropicLanguageModel } from "@effect/ai-anthropic"
import { OpenAiClient, OpenAiLanguageModel } from "@effect/ai-openai"
import { HttpClient } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Destinations } from "../Outbound/Destinations.js"
import { Cause, Clock, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import { OpenAiCompatibleSettings, ScriptedSettings } from "../Domain/Agents.js"
import { ModelsConfig, type ModelsConfigShape } from "./Config.js"
import * as OpenAiCompatible from "./OpenAiCompatible.js"
import * as Scripted from "./Scripted.js"

// ---------------------------------------------------------------------------------------------
// The conversation the agent sees (persisted by the run actor as JSON)

export const UserMessage = Schema.Struct({ type: Schema.Literal("user_message"), text: Schema.String })
export const AssistantMessage = Schema.Struct({ type: Schema.Literal("assistant_message"), text: Schema.String })
/** A tool call the model proposed (in an earlier step). */
export const ToolCallItem = Schema.Struct({
  type: Schema.Literal("tool_call"),
  call_id: Schema.String,
  name: Schema.String,
  input: Schema.Unknown
})
/** The outcome of a tool call; `output` is any JSON value. */
export const ToolResultItem = Schema.Struct({
  type: Schema.Literal("tool_result"),
  call_id: Schema.String,
  name: Schema.String,
  output: Schema.Unknown,
  is_error: Schema.Boolean
})
export const ConversationItem = Schema.Union(UserMessage, AssistantMessage, ToolCallItem, ToolResultItem).annotations({
  identifier: "ConversationItem"
})
export type ConversationItem = typeof ConversationItem.Type

/** A tool the agent may call: its name, description and the JSON Schema (an object) of its input. */
export const ToolDefinition = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1)),
  description: Schema.optional(Schema.String),
  input_schema: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "ToolDefinition" })
export type ToolDefinition = typeof ToolDefinition.Type

const Count = Schema.Number.pipe(Schema.int(), Schema.nonNegative())
export const Usage = Schema.Struct({ input_tokens: Count, output_tokens: Count, model_calls: Count }).annotations({
  identifier: "Usage"
})
export type Usage = typeof Usage.Type

export const ProposedCall = Schema.Struct({ call_id: Schema.String, name: Schema.String, input: Schema.Unknown })
export type ProposedCall = typeof ProposedCall.Type

/** The model answered: the run's final content. */
export const Final = Schema.TaggedStruct("Final", {
  text: Schema.String,
  usage: Usage,
  provider_request_id: Schema.optional(Schema.String)
})
export type Final = typeof Final.Type
/** The model proposed tool calls (unexecuted), possibly with some text besides. */
export const ToolCalls = Schema.TaggedStruct("ToolCalls", {
  calls: Schema.NonEmptyArray(ProposedCall),
  text: Schema.optional(Schema.String),
  usage: Usage,
  provider_request_id: Schema.optional(Schema.String)
})
export type ToolCalls = typeof ToolCalls.Type
export const StepResult = Schema.Union(Final, ToolCalls).annotations({ identifier: "StepResult" })
export type StepResult = typeof StepResult.Type

export interface StepInput {
  readonly profile: {
    readonly id: string
    readonly provider: string
    readonly model: string
    readonly settings: Readonly<Record<string, unknown>>
  }
  readonly credential: Option.Option<Redacted.Redacted<string>>
  readonly instructions: string
  /** The tools offered to the model (none when absent). */
  readonly tools?: ReadonlyArray<ToolDefinition> | undefined
  readonly conversation: ReadonlyArray<ConversationItem>
}

// ---------------------------------------------------------------------------------------------
// Typed failures

const failureFields = {
  provider: Schema.String,
  message: Schema.String,
  provider_request_id: Schema.optional(Schema.String),
  retry_after_seconds: Schema.optional(Schema.Number)
}
/** HTTP 429: the provider is limiting our requests; `retry_after_seconds` when it said so. */
export class ModelRateLimited extends Schema.TaggedError<ModelRateLimited>()("ModelRateLimited", failureFields) {}
/** HTTP 5xx or 408, a timeout, or a connection failure: worth retrying later. */
export class ModelUnavailable extends Schema.TaggedError<ModelUnavailable>()("ModelUnavailable", failureFields) {}
/** A body that is not JSON or not the provider's shape, unparseable tool arguments, an unknown tool. */
export class ModelInvalidResponse extends Schema.TaggedError<ModelInvalidResponse>()("ModelInvalidResponse", failureFields) {}
/** HTTP 401/403, or no credential for a provider that needs one. */
export class ModelAuthFailed extends Schema.TaggedError<ModelAuthFailed>()("ModelAuthFailed", failureFields) {}
/** Anything else: the scripted `fail` step, other 4xx, an unusable profile. */
export class ModelFailed extends Schema.TaggedError<ModelFailed>()("ModelFailed", failureFields) {}

export const ModelError = Schema.Union(ModelRateLimited, ModelUnavailable, ModelInvalidResponse, ModelAuthFailed, ModelFailed)
export type ModelError = ModelRateLimited | ModelUnavailable | ModelInvalidResponse | ModelAuthFailed | ModelFailed

const MAX_MESSAGE = 1000
const MAX_PROVIDER_MESSAGE = 300

/** The provider's request id among response headers (lowercase names). */
export const requestIdOf = (headers: Readonly<Record<string, unknown>>): string | undefined => {
  for (const name of ["x-request-id", "request-id"]) {
    const value = headers[name]
    if (typeof value === "string" && value.length > 0) return value
  }
  return undefined
}

/** Seconds to wait from `retry-after-ms`, `retry-after` (seconds or an HTTP date). */
export const retryAfterSeconds = (headers: Readonly<Record<string, unknown>>, nowMillis: number): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (typeof ms === "string" && ms.trim() !== "" && Number.isFinite(Number(ms)) && Number(ms) >= 0) {
    return Math.ceil(Number(ms)) / 1000
  }
  const value = headers["retry-after"]
  if (typeof value !== "string" || value.trim() === "") return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds : undefined
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMillis) / 1000))
}

/** The provider's own error text from an error body (OpenAI, Anthropic, vLLM, FastAPI shapes). */
const providerMessageOf = (body: string | undefined): string | undefined => {
  if (body === undefined) return undefined
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  const pick = (value: unknown): string | undefined =>
    typeof value === "string" && value.trim() !== "" ? value.trim() : undefined
  if (typeof parsed === "string") return pick(parsed)
  if (typeof parsed !== "object" || parsed === null) return undefined
  const record = parsed as Record<string, unknown>
  const error = record.error
  if (typeof error === "object" && error !== null) return pick((error as Record<string, unknown>).message)
  return pick(error) ?? pick(record.message) ?? pick(record.detail)
}

const truncate = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text)

/** Context for building error messages. */
export interface ErrorContext {
  /** Whether the provider's own error text may be quoted (not for customer-chosen base URLs). */
  readonly quoteProvider: boolean
  readonly nowMillis: number
}

/**
 * Maps an @effect/ai failure to a typed model error. Messages are built here; a provider's own
 * error text is quoted only when `quoteProvider` (and never for 401/403).
 */
export const toModelError = (provider: string, error: AiError.AiError, context: ErrorContext): ModelError => {
  const quote = (text: string | undefined) =>
    context.quoteProvider && text !== undefined ? `: ${truncate(text, MAX_PROVIDER_MESSAGE)}` : ""
  switch (error._tag) {
    case "HttpResponseError": {
      const { headers, status } = error.response
      const id = requestIdOf(headers)
      const base = { provider, ...(id === undefined ? {} : { provider_request_id: id }) }
      if (status >= 200 && status < 300) {
        return new ModelInvalidResponse({
          ...base,
          message: error.reason === "EmptyBody"
            ? `${provider} sent an empty response body`
            : `${provider} sent a response body that is not valid JSON`
        })
      }
      const said = quote(providerMessageOf(error.body))
      if (status === 429) {
        const retry = retryAfterSeconds(headers, context.nowMillis)
        return new ModelRateLimited({
          ...base,
          message: `${provider} is rate limiting requests (HTTP 429)${said}`,
          ...(retry === undefined ? {} : { retry_after_seconds: retry })
        })
      }
      if (status === 401 || status === 403) {
        return new ModelAuthFailed({ ...base, message: `${provider} refused the credential (HTTP ${status})` })
      }
      if (status >= 500 || status === 408) {
        return new ModelUnavailable({ ...base, message: `${provider} is unavailable (HTTP ${status})${said}` })
      }
      if (status >= 300 && status < 400) {
        return new ModelFailed({ ...base, message: `${provider} answered with a redirect (HTTP ${status}), which is not followed` })
      }
      return new ModelFailed({ ...base, message: `${provider} refused the request (HTTP ${status})${said}` })
    }
    case "HttpRequestError":
      return error.reason === "Transport"
        ? new ModelUnavailable({ provider, message: `${provider} could not be reached` })
        : new ModelFailed({
          provider,
          message: error.reason === "InvalidUrl"
            ? `The ${provider} URL is not valid`
            : `The request to ${provider} could not be encoded`
        })
    case "MalformedOutput":
      return new ModelInvalidResponse({
        provider,
        message: `${provider} sent a response that could not be used${quote(error.description)}`
      })
    case "MalformedInput":
      return new ModelFailed({
        provider,
        message: `The conversation could not be sent to ${provider}${error.description ? `: ${error.description}` : ""}`
      })
    case "UnknownError":
      return new ModelFailed({ provider, message: error.description ?? `The ${provider} call failed` })
  }
}

/** The same error with the credential's value (if any) removed from its message. */
const scrubbed = (error: ModelError, credential: Option.Option<Redacted.Redacted<string>>): ModelError => {
  let message = error.message
  if (Option.isSome(credential)) {
    const secret = Redacted.value(credential.value)
    if (secret.length >= 4) message = message.split(secret).join("[redacted]")
  }
  message = truncate(message, MAX_MESSAGE)
  if (message === error.message) return error
  const fields = {
    provider: error.provider,
    message,
    ...(error.provider_request_id === undefined ? {} : { provider_request_id: error.provider_request_id }),
    ...(error.retry_after_seconds === undefined ? {} : { retry_after_seconds: error.retry_after_seconds })
  }
  switch (error._tag) {
    case "ModelRateLimited":
      return new ModelRateLimited(fields)
    case "ModelUnavailable":
      return new ModelUnavailable(fields)
    case "ModelInvalidResponse":
      return new ModelInvalidResponse(fields)
    case "ModelAuthFailed":
      return new ModelAuthFailed(fields)
    case "ModelFailed":
      return new ModelFailed(fields)
  }
}

// ---------------------------------------------------------------------------------------------
// The prompt and the tools

/**
 * The conversation as an @effect/ai prompt, the instructions as its system message. Built from
 * `Prompt.makeMessage`/`makePart` (no decoding, so it cannot throw). Consecutive assistant items
 * (text and proposed calls) form one assistant message and consecutive tool results one tool
 * message, the way providers produced and expect them (parallel calls, then their results).
 */
export const toPrompt = (instructions: string, items: ReadonlyArray<ConversationItem>): Prompt.Prompt => {
  const messages: Array<Prompt.Message> = []
  if (instructions.trim() !== "") messages.push(Prompt.makeMessage("system", { content: instructions }))
  let assistant: Array<Prompt.AssistantMessagePart> | undefined
  let tool: Array<Prompt.ToolMessagePart> | undefined
  const flush = () => {
    if (assistant) messages.push(Prompt.makeMessage("assistant", { content: assistant }))
    if (tool) messages.push(Prompt.makeMessage("tool", { content: tool }))
    assistant = undefined
    tool = undefined
  }
  for (const item of items) {
    switch (item.type) {
      case "user_message":
        flush()
        messages.push(Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: item.text })] }))
        break
      case "assistant_message":
      case "tool_call": {
        if (tool) flush()
        assistant ??= []
        assistant.push(
          item.type === "assistant_message"
            ? Prompt.makePart("text", { text: item.text })
            : Prompt.makePart("tool-call", { id: item.call_id, name: item.name, params: item.input, providerExecuted: false })
        )
        break
      }
      case "tool_result":
        if (assistant) {
          messages.push(Prompt.makeMessage("assistant", { content: assistant }))
          assistant = undefined
        }
        tool ??= []
        tool.push(
          Prompt.makePart("tool-result", {
            id: item.call_id,
            name: item.name,
            result: item.output,
            isFailure: item.is_error,
            providerExecuted: false
          })
        )
        break
    }
  }
  flush()
  return Prompt.fromMessages(messages)
}

/** Any JSON object: what a tool call's input is decoded with (the customer's schema is checked where the tool runs). */
const AnyObject = Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown }))

/**
 * A tool whose parameters decode permissively (any JSON object) while the JSON Schema sent to the
 * provider is exactly the customer's (the `jsonSchema` annotation replaces the generated one).
 */
export const toolOf = (definition: ToolDefinition) =>
  Tool.make(definition.name, {
    ...(definition.description === undefined ? {} : { description: definition.description }),
    success: Schema.Unknown
  }).setParameters(AnyObject.annotations({ jsonSchema: definition.input_schema }))

/**
 * The tools as an @effect/ai toolkit with its handlers. The library wants handlers even though
 * calls are returned unexecuted (`disableToolCallResolution`); these never run.
 */
const toolkitOf = (tools: ReadonlyArray<ToolDefinition>) => {
  const toolkit = Toolkit.make(...tools.map(toolOf))
  const handlers = Object.fromEntries(
    tools.map((t) => [t.name, () => Effect.dieMessage("tool calls are returned to the run, not executed by the step engine")])
  )
  return Effect.provide(toolkit, toolkit.toLayer(handlers))
}

// ---------------------------------------------------------------------------------------------
// The engine

const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096

/** How a step is sent: the model layer and whether the request timeout applies. */
interface Target {
  readonly model: Layer.Layer<LanguageModel.LanguageModel>
  readonly remote: boolean
  /** The request id header of the last 2xx response, filled in by the HTTP client. */
  readonly seen: { requestId?: string | undefined }
}

const makeStep = (config: ModelsConfigShape, http: HttpClient.HttpClient, guardedHttp: HttpClient.HttpClient) => {
  const httpLayer = Layer.succeed(HttpClient.HttpClient, http)
  const guardedHttpLayer = Layer.succeed(HttpClient.HttpClient, guardedHttp)

  /** Every provider request: non-2xx as errors (status and headers kept), request id noted, no trace headers. */
  const transformClient = (seen: Target["seen"]) => (client: HttpClient.HttpClient): HttpClient.HttpClient =>
    client.pipe(
      HttpClient.filterStatusOk,
      HttpClient.tap((response) =>
        Effect.sync(() => {
          seen.requestId = requestIdOf(response.headers)
        })
      ),
      HttpClient.withTracerPropagation(false)
    )

  const targetOf = (input: StepInput): Effect.Effect<Target, ModelError> => {
    const { model, provider, settings } = input.profile
    const seen: Target["seen"] = {}
    const key = Option.filter(input.credential, (k) => Redacted.value(k).trim().length > 0)
    const requireKey = Option.match(key, {
      onNone: () =>
        Effect.fail(
          new ModelAuthFailed({ provider, message: `The model profile has no credential; the ${provider} provider needs one` })
        ),
      onSome: Effect.succeed
    })
    /** A provider over HTTP: the operator's provider URLs on `http`, customer URLs on the guarded client. */
    const remote = (layer: Layer.Layer<LanguageModel.LanguageModel, never, HttpClient.HttpClient>, guarded = false): Target => ({
      model: Layer.provide(layer, guarded ? guardedHttpLayer : httpLayer),
      remote: true,
      seen
    })
    switch (provider) {
      case "scripted":
        return Schema.decodeUnknown(ScriptedSettings)(settings).pipe(
          Effect.mapError(() => new ModelFailed({ provider, message: "The scripted model profile's settings.steps are not valid" })),
          Effect.map((valid): Target => ({ model: Scripted.layer(valid), remote: false, seen }))
        )
      case "openai":
        return Effect.map(requireKey, (apiKey) =>
          remote(
            OpenAiLanguageModel.layer({ model, config: { strict: false, store: false } }).pipe(
              Layer.provide(
                OpenAiClient.layer({ apiKey, apiUrl: config.openaiBaseUrl, transformClient: transformClient(seen) })
              )
            )
          ))
      case "anthropic": {
        const maxTokens = settings.max_tokens
        const max_tokens = typeof maxTokens === "number" && Number.isInteger(maxTokens) && maxTokens > 0
          ? maxTokens
          : DEFAULT_ANTHROPIC_MAX_TOKENS
        return Effect.map(requireKey, (apiKey) =>
          remote(
            AnthropicLanguageModel.layer({ model, config: { max_tokens } }).pipe(
              Layer.provide(
                AnthropicClient.layer({ apiKey, apiUrl: config.anthropicBaseUrl, transformClient: transformClient(seen) })
              )
            )
          ))
      }
      case "openai_compatible":
        return Schema.decodeUnknown(OpenAiCompatibleSettings)(settings).pipe(
          Effect.mapError(() =>
            new ModelFailed({ provider, message: "The openai_compatible model profile's settings.base_url is not an http or https URL" })
          ),
          Effect.map(({ base_url }) =>
            remote(
              OpenAiCompatible.layer({ model }).pipe(
                Layer.provide(OpenAiClient.layer({
                  ...(Option.isSome(key) ? { apiKey: key.value } : {}),
                  apiUrl: base_url,
                  transformClient: transformClient(seen)
                }))
              ),
              true
            )
          )
        )
      default:
        return Effect.fail(new ModelFailed({ provider, message: `Unknown model provider '${provider}'` }))
    }
  }

  const generate = (input: StepInput, target: Target) => {
    const tools = input.tools ?? []
    const prompt = toPrompt(input.instructions, input.conversation)
    const call: Effect.Effect<LanguageModel.GenerateTextResponse<any>, AiError.AiError, LanguageModel.LanguageModel> =
      tools.length === 0
        ? LanguageModel.generateText({ prompt, disableToolCallResolution: true })
        : LanguageModel.generateText({ prompt, toolkit: toolkitOf(tools), disableToolCallResolution: true }) as any
    return Effect.provide(call, target.model)
  }

  const toResult = (response: LanguageModel.GenerateTextResponse<any>, target: Target): StepResult => {
    const usage: Usage = {
      input_tokens: response.usage.inputTokens ?? 0,
      output_tokens: response.usage.outputTokens ?? 0,
      model_calls: 1
    }
    const metadata = response.content.find((part) => part.type === "response-metadata")
    const requestId = target.seen.requestId ??
      (metadata !== undefined && metadata.type === "response-metadata" ? Option.getOrUndefined(metadata.id) : undefined)
    const id = requestId === undefined || requestId === "" ? {} : { provider_request_id: requestId }
    const calls: Array<ProposedCall> = []
    for (const part of response.toolCalls) {
      if (!part.providerExecuted) calls.push({ call_id: part.id, name: part.name, input: part.params })
    }
    const text = response.text
    if (calls.length > 0) {
      return ToolCalls.make({ calls: calls as [ProposedCall, ...Array<ProposedCall>], ...(text === "" ? {} : { text }), usage, ...id })
    }
    return Final.make({ text, usage, ...id })
  }

  /** One model call; proposed tool calls are returned, never executed. */
  const step = (input: StepInput): Effect.Effect<StepResult, ModelError> => {
    const { id: profileId, model, provider } = input.profile
    return Effect.gen(function*() {
      const names = new Set<string>()
      for (const tool of input.tools ?? []) {
        if (names.has(tool.name)) {
          return yield* new ModelFailed({ provider, message: `Two tools are named '${tool.name}'` })
        }
        names.add(tool.name)
      }
      const target = yield* targetOf(input)
      const called = generate(input, target).pipe(
        Effect.catchAll((error) =>
          Effect.flatMap(Clock.currentTimeMillis, (nowMillis) =>
            Effect.fail(toModelError(provider, error, { quoteProvider: provider !== "openai_compatible", nowMillis }))
          )
        )
      )
      const response = yield* (target.remote
        ? Effect.timeoutFail(called, {
          duration: Duration.seconds(config.requestTimeoutSeconds),
          onTimeout: () =>
            new ModelUnavailable({ provider, message: `${provider} did not answer within ${config.requestTimeoutSeconds} s` })
        })
        : called)
      return toResult(response, target)
    }).pipe(
      // A defect (a bug here or in a library) fails the step rather than the run actor.
      Effect.catchAllDefect((defect) =>
        Effect.zipRight(
          Effect.logError("model call died", Cause.die(defect)).pipe(
            Effect.annotateLogs({ provider, model, model_profile_id: profileId })
          ),
          Effect.fail(new ModelFailed({ provider, message: `The ${provider} call failed unexpectedly` }))
        )
      ),
      Effect.mapError((error) => scrubbed(error, input.credential)),
      Effect.tapError((error) =>
        Effect.logWarning("model call failed").pipe(
          Effect.annotateLogs({
            provider,
            model,
            model_profile_id: profileId,
            error: error._tag,
            error_message: error.message,
            ...(error.provider_request_id === undefined ? {} : { provider_request_id: error.provider_request_id })
          })
        )
      ),
      Effect.withSpan("StepEngine.step", {
        attributes: { "model.provider": provider, "model.name": model, "model_profile.id": profileId }
      })
    )
  }

  return { step } as const
}

/**
 * The engine. Its HTTP client is `NodeHttpClient.layerUndici` rather than `FetchHttpClient`: a
 * dedicated undici connection pool owned by this service's scope (closed at shutdown), and it
 * follows no redirects, so a provider URL cannot bounce a request (and the credential header,
 * which fetch would carry along for `x-api-key`) to another host; a 3xx is reported instead.
 * Timeouts are Effect's (`MODEL_REQUEST_TIMEOUT_SECONDS`), which abort the request.
 */
export class StepEngine extends Effect.Service<StepEngine>()("StepEngine", {
  effect: Effect.gen(function*() {
    const config = yield* ModelsConfig
    const http = yield* HttpClient.HttpClient
    const destinations = yield* Destinations
    return makeStep(config, http, NodeHttpClient.makeUndici(destinations.dispatcher))
  }),
  dependencies: [ModelsConfig.layer, NodeHttpClient.layerUndici, Destinations.Default]
}) {
  /** The engine with the given operator config and destination allowlist (tests). */
  static readonly layerWith = (
    overrides: Partial<ModelsConfigShape> = {},
    destinationAllowlist = ""
  ): Layer.Layer<StepEngine> =>
    StepEngine.DefaultWithoutDependencies.pipe(
      Layer.provide(ModelsConfig.layerWith(overrides)),
      Layer.provide(NodeHttpClient.layerUndici),
      Layer.provide(Destinations.layerWith(destinationAllowlist))
    )
}
