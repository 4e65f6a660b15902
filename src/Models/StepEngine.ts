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
 *
 * Each call is a `model.call` span (provider, model, profile, run; its outcome, token counts and the
 * provider's request id), never with the prompt or the answer; the spans of the provider call within
 * it fail with their error's type only (its message would hold the provider's response body).
 */
import { AnthropicClient, AnthropicLanguageModel } from "@effect/ai-anthropic"
import { OpenAiClient, OpenAiLanguageModel } from "@effect/ai-openai"
import type * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import { HttpClient } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Cause, Clock, Context, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import { Agent } from "undici"

import { OpenAiCompatibleSettings, ScriptedSettings } from "../Domain/Agents.js"
import {
  type ConversationItem,
  Final,
  type ProducedFile,
  type ProposedCall,
  type StepResult,
  ToolCalls,
  type ToolDefinition,
  type Usage
} from "../Domain/Conversation.js"
import { provideOwn } from "../Kernel/OwnFiber.js"
import { annotateSpan, traced } from "../Kernel/Spans.js"
import { withFailureDetailsWithheld } from "../Observability/Tracing.js"
import { Destinations } from "../Outbound/Destinations.js"
import { ModelsConfig, type ModelsConfigShape } from "./Config.js"
import { ModelAuthFailed, type ModelError, ModelFailed, ModelUnavailable, requestIdOf, scrubbed, toModelError } from "./Errors.js"
import * as OpenAiCompatible from "./OpenAiCompatible.js"
import { toolkitOf, toPrompt } from "./Prompt.js"
import * as Scripted from "./Scripted.js"

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
  /** The bytes of the input files the conversation names, by file id (D13; absent: deleted since). */
  readonly files?: ReadonlyMap<string, Uint8Array> | undefined
  /** The run the step is for: an attribute of its `model.call` span. */
  readonly runId?: string | undefined
}

// ---------------------------------------------------------------------------------------------
// The engine

const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096

/** How a step is sent: the model it is provided with and whether the request timeout applies. */
interface Target {
  readonly provide: <A, E>(call: Effect.Effect<A, E, LanguageModel.LanguageModel>) => Effect.Effect<A, E>
  readonly remote: boolean
  /** The request id header of the last 2xx response, filled in by the HTTP client. */
  readonly seen: { requestId?: string | undefined }
}

/** Extensions of the files a model produced, for the name of one that comes without a name. */
const EXTENSIONS: Record<string, string> = {
  "text/plain": "txt",
  "text/markdown": "md",
  "text/csv": "csv",
  "application/json": "json",
  "application/pdf": "pdf",
  "image/png": "png",
  "image/jpeg": "jpg"
}

/**
 * The files among a response's parts (D13): their bytes, media type and name (the scripted model
 * names its files in the part's `scripted` metadata; others get `output-N.<ext>`).
 */
const filesOf = (parts: ReadonlyArray<{ readonly type: string }>): Array<ProducedFile> =>
  parts.flatMap((part, n) => {
    if (part.type !== "file") return []
    const file = part as unknown as { mediaType: string; data: Uint8Array; metadata?: { scripted?: { filename?: unknown } } }
    const named = file.metadata?.scripted?.filename
    const base = file.mediaType.split(";")[0]!.trim().toLowerCase()
    const filename = typeof named === "string" && named !== "" ? named : `output-${n}.${EXTENSIONS[base] ?? "bin"}`
    return [{ filename, content_type: file.mediaType, data: Buffer.from(file.data).toString("base64") }]
  })

/**
 * Whether the model call `input` asks for is made here and answers at once (the scripted model's
 * answer with no sleep before it): nothing outside the process happens before its answer, so the
 * run actor may commit the run's start together with that answer (one transaction, issue 20).
 */
/**
 * A scripted profile's settings, validated once per settings object: a step asks twice (whether it
 * answers at once, then its model), with the same profile.
 */
const decodeScripted = Schema.decodeUnknownOption(ScriptedSettings)
const scriptedSeen = new WeakMap<object, Option.Option<ScriptedSettings>>()
const scriptedSettings = (settings: unknown): Option.Option<ScriptedSettings> => {
  if (typeof settings !== "object" || settings === null) return decodeScripted(settings)
  let valid = scriptedSeen.get(settings)
  if (valid === undefined) scriptedSeen.set(settings, valid = decodeScripted(settings))
  return valid
}

export const answersAtOnce = (input: {
  readonly profile: Pick<StepInput["profile"], "provider" | "settings">
  readonly conversation: StepInput["conversation"]
}): boolean => {
  if (input.profile.provider !== "scripted") return false
  const settings = scriptedSettings(input.profile.settings)
  if (Option.isNone(settings)) return false
  // the model's call number: its assistant turns so far (consecutive assistant items are one)
  let turns = 0
  let previous = false
  for (const item of input.conversation) {
    const assistant = item.type === "assistant_message" || item.type === "tool_call"
    if (assistant && !previous) turns++
    previous = assistant
  }
  return Scripted.answersAtOnce(settings.value, turns)
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
    // the error (a schema class, validated) is built only when a provider that needs the key runs this
    const requireKey = Option.match(key, {
      onNone: () =>
        Effect.failSync(() =>
          new ModelAuthFailed({ provider, message: `The model profile has no credential; the ${provider} provider needs one` })
        ),
      onSome: Effect.succeed
    })
    /** A provider over HTTP: the operator's provider URLs on `http`, customer URLs on the guarded client. */
    const remote = (layer: Layer.Layer<LanguageModel.LanguageModel, never, HttpClient.HttpClient>, guarded = false): Target => ({
      provide: Effect.provide(Layer.provide(layer, guarded ? guardedHttpLayer : httpLayer)),
      remote: true,
      seen
    })
    switch (provider) {
      case "scripted":
        return Option.match(scriptedSettings(settings), {
          onNone: () => Effect.fail(new ModelFailed({ provider, message: "The scripted model profile's settings.steps are not valid" })),
          // the service itself, not a layer: building a layer for every call costs more than the
          // call; set on the calling fiber (the run actor's, which makes one call at a time), not
          // provided and restored around the call
          onSome: (valid) =>
            Effect.succeed<Target>({
              provide: (call) =>
                Effect.flatMap(Scripted.make(valid), (model) => provideOwn(Context.make(LanguageModel.LanguageModel, model))(call)),
              remote: false,
              seen
            })
        })
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
    const prompt = toPrompt(input.instructions, input.conversation, input.files, {
      binary: input.profile.provider === "openai" || input.profile.provider === "anthropic"
    })
    const call: Effect.Effect<LanguageModel.GenerateTextResponse<any>, AiError.AiError, LanguageModel.LanguageModel> = tools.length === 0
      ? LanguageModel.generateText({ prompt, disableToolCallResolution: true })
      : LanguageModel.generateText({ prompt, toolkit: toolkitOf(tools), disableToolCallResolution: true }) as any
    // The provider's spans (@effect/ai's, the HTTP client's) without their errors' response bodies.
    return withFailureDetailsWithheld(target.provide(call))
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
    const produced = filesOf(response.content)
    const files = produced.length === 0 ? {} : { files: produced }
    if (calls.length > 0) {
      return ToolCalls.make({
        calls: calls as [ProposedCall, ...Array<ProposedCall>],
        ...(text === "" ? {} : { text }),
        ...files,
        usage,
        ...id
      })
    }
    return Final.make({ text, ...files, usage, ...id })
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
          Effect.flatMap(
            Clock.currentTimeMillis,
            (nowMillis) => Effect.fail(toModelError(provider, error, { quoteProvider: provider !== "openai_compatible", nowMillis }))
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
      const result = toResult(response, target)
      yield* annotateSpan({
        "model.outcome": result._tag === "Final" ? "final" : "tool_calls",
        "model.input_tokens": result.usage.input_tokens,
        "model.output_tokens": result.usage.output_tokens,
        ...(result.provider_request_id === undefined ? {} : { "model.provider_request_id": result.provider_request_id })
      })
      return result
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
        Effect.zipRight(
          annotateSpan({
            "model.outcome": error._tag,
            ...(error.provider_request_id === undefined ? {} : { "model.provider_request_id": error.provider_request_id })
          }),
          Effect.logWarning("model call failed")
        ).pipe(
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
      // One span per model call (a retried step is another call); @effect/ai's
      // `LanguageModel.generateText` and the HTTP client's span are its children. No prompt or answer.
      traced("model.call", {
        attributes: {
          "model.provider": provider,
          "model.name": model,
          "model_profile.id": profileId,
          ...(input.runId === undefined ? {} : { "run.id": input.runId })
        }
      })
    )
  }

  return { step } as const
}

/**
 * The engine. Its HTTP clients are undici connection pools owned by this service's scope (closed at
 * shutdown) rather than `FetchHttpClient`: they follow no redirects, so a provider URL cannot
 * bounce a request (and the credential header, which fetch would carry along for `x-api-key`) to
 * another host (a 3xx is reported instead), and they refuse a response body over
 * `MODEL_RESPONSE_MAX_BYTES`. Customer model servers go through the destination guard.
 * Timeouts are Effect's (`MODEL_REQUEST_TIMEOUT_SECONDS`), which abort the request.
 */
export class StepEngine extends Effect.Service<StepEngine>()("StepEngine", {
  scoped: Effect.gen(function*() {
    const config = yield* ModelsConfig
    const destinations = yield* Destinations
    const limits = { maxResponseSize: config.responseMaxBytes }
    const providers = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent(limits)),
      (agent) => Effect.promise(() => agent.close()).pipe(Effect.ignore)
    )
    const customers = yield* destinations.dispatcherWith(limits)
    return makeStep(config, NodeHttpClient.makeUndici(providers), NodeHttpClient.makeUndici(customers))
  }),
  dependencies: [ModelsConfig.layer, Destinations.Default]
}) {
  /** The engine with the given operator config and destination allowlist (tests). */
  static readonly layerWith = (
    overrides: Partial<ModelsConfigShape> = {},
    destinationAllowlist = ""
  ): Layer.Layer<StepEngine> =>
    StepEngine.DefaultWithoutDependencies.pipe(
      Layer.provide(ModelsConfig.layerWith(overrides)),
      Layer.provide(Destinations.layerWith(destinationAllowlist))
    )
}
