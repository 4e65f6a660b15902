/**
 * What the step engine suites (test/StepEngine.*.test.ts) share: the customer's tool and a
 * conversation history, what differs between the three HTTP providers (their wire formats through
 * test/support/ModelServers.ts), an engine pointed at a local model server, step inputs, and a
 * capture of every log line and span attribute.
 */
import { expect } from "@effect/vitest"
import { Effect, Logger, LogLevel, Option, Redacted, Tracer } from "effect"
import { type ConversationItem, type ToolDefinition } from "../../src/Domain/Conversation.js"
import { type ModelsConfigShape } from "../../src/Models/Config.js"
import { StepEngine, type StepInput } from "../../src/Models/StepEngine.js"
import * as ModelServers from "./ModelServers.js"
import {
  anthropicError,
  anthropicMessages,
  chatCompletions,
  type ModelServer,
  openAiError,
  openAiResponses,
  type Recorded,
  type UsageFigures
} from "./ModelServers.js"

export const SECRET = "sk-proj-Zq8vT3blbkFJwire-test-credential-0123456789"

/** The customer's tool, with a schema the library would never generate itself. */
export const LOOKUP: ToolDefinition = {
  name: "lookup_order",
  description: "Find an order by its id",
  input_schema: {
    type: "object",
    properties: {
      order_id: { type: "string", pattern: "^o_", description: "The order id" },
      fields: { type: "array", items: { enum: ["status", "eta"] }, minItems: 1 }
    },
    required: ["order_id"],
    additionalProperties: false
  }
}

export const HISTORY: ReadonlyArray<ConversationItem> = [
  { type: "user_message", text: "Where is o_1?" },
  { type: "assistant_message", text: "Let me look." },
  { type: "tool_call", call_id: "call_9", name: "lookup_order", input: { order_id: "o_1" } },
  { type: "tool_result", call_id: "call_9", name: "lookup_order", output: { status: "shipped" }, is_error: false }
]

export interface Call {
  readonly id: string
  readonly name: string
  readonly input: unknown
}

/** What differs between the three HTTP providers. */
export interface ProviderCase {
  readonly name: "openai" | "anthropic" | "openai_compatible"
  readonly model: string
  readonly settings: (server: ModelServer) => Record<string, unknown>
  readonly pathname: string
  readonly idHeader: string
  readonly credentialSent: (request: Recorded) => string | undefined
  readonly text: (text: string, options?: { readonly id?: string; readonly usage?: UsageFigures }) => unknown
  readonly toolCalls: (calls: ReadonlyArray<Call>, text?: string) => unknown
  readonly error: (type: string, message: string) => unknown
  /** The tool definition as sent: name, description and the JSON Schema. */
  readonly toolSent: (body: any) => { name: unknown; description: unknown; schema: unknown }
  /** The request's system instructions and conversation, for HISTORY. */
  readonly historySent: (body: any) => unknown
  readonly expectedHistory: unknown
}

export const cases: ReadonlyArray<ProviderCase> = [
  {
    name: "openai",
    model: "gpt-4.1-mini",
    settings: () => ({}),
    pathname: "/v1/responses",
    idHeader: "x-request-id",
    credentialSent: (r) => r.headers.authorization?.replace(/^Bearer /, ""),
    text: (text, options) => openAiResponses.text(text, options),
    toolCalls: (calls, text) =>
      openAiResponses.functionCalls(
        calls.map((c) => ({ call_id: c.id, name: c.name, arguments: JSON.stringify(c.input) })),
        text === undefined ? {} : { text }
      ),
    error: (type, message) => openAiError(message, type),
    toolSent: (body) => {
      expect(body.tools[0]).toMatchObject({ type: "function", strict: false })
      return { name: body.tools[0].name, description: body.tools[0].description, schema: body.tools[0].parameters }
    },
    historySent: (body) => body.input,
    expectedHistory: [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "input_text", text: "Where is o_1?" }] },
      { role: "assistant", content: [{ type: "output_text", text: "Let me look." }] },
      { type: "function_call", call_id: "call_9", name: "lookup_order", arguments: "{\"order_id\":\"o_1\"}" },
      { type: "function_call_output", call_id: "call_9", output: "{\"status\":\"shipped\"}" }
    ]
  },
  {
    name: "anthropic",
    model: "claude-sonnet-4-5",
    settings: () => ({}),
    pathname: "/v1/messages",
    idHeader: "request-id",
    credentialSent: (r) => r.headers["x-api-key"] as string | undefined,
    text: (text, options) => anthropicMessages.text(text, options),
    toolCalls: (calls, text) => anthropicMessages.toolUse(calls, text === undefined ? {} : { text }),
    error: (type, message) => anthropicError(type, message),
    toolSent: (body) => ({ name: body.tools[0].name, description: body.tools[0].description, schema: body.tools[0].input_schema }),
    historySent: (body) => ({ system: body.system, messages: body.messages }),
    expectedHistory: {
      system: [{ type: "text", text: "Be brief." }],
      messages: [
        { role: "user", content: [{ type: "text", text: "Where is o_1?" }] },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Let me look." },
            { type: "tool_use", id: "call_9", name: "lookup_order", input: { order_id: "o_1" } }
          ]
        },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "call_9", content: "{\"status\":\"shipped\"}", is_error: false }]
        }
      ]
    }
  },
  {
    name: "openai_compatible",
    model: "llama3.1:8b",
    // A trailing slash, as people often write it.
    settings: (server) => ({ base_url: `${server.url}/v1/` }),
    pathname: "/v1/chat/completions",
    idHeader: "x-request-id",
    credentialSent: (r) => r.headers.authorization?.replace(/^Bearer /, ""),
    text: (text, options) => chatCompletions.text(text, options),
    toolCalls: (calls, text) =>
      chatCompletions.toolCalls(
        calls.map((c) => ({ id: c.id, name: c.name, arguments: JSON.stringify(c.input) })),
        text === undefined ? {} : { text }
      ),
    error: (type, message) => openAiError(message, type),
    toolSent: (body) => {
      expect(body.tools[0].type).toBe("function")
      const f = body.tools[0].function
      return { name: f.name, description: f.description, schema: f.parameters }
    },
    historySent: (body) => body.messages,
    expectedHistory: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Where is o_1?" },
      {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [{ id: "call_9", type: "function", function: { name: "lookup_order", arguments: "{\"order_id\":\"o_1\"}" } }]
      },
      { role: "tool", tool_call_id: "call_9", content: "{\"status\":\"shipped\"}" }
    ]
  }
]

/** Runs `f` with a model server and an engine whose openai/anthropic base URLs point at it. */
export const withServer = <A, E>(
  f: (server: ModelServer, engine: StepEngine) => Effect.Effect<A, E>,
  overrides: Partial<ModelsConfigShape> = {},
  // openai_compatible base URLs are the customer's: the local server is reached only when allowlisted
  destinationAllowlist = "127.0.0.1/32"
) =>
  Effect.gen(function*() {
    const server = yield* ModelServers.make
    return yield* Effect.flatMap(StepEngine, (engine) => f(server, engine)).pipe(
      Effect.provide(
        StepEngine.layerWith({ openaiBaseUrl: `${server.url}/v1`, anthropicBaseUrl: server.url, ...overrides }, destinationAllowlist)
      )
    )
  })

export const inputFor = (c: ProviderCase, server: ModelServer, overrides: Partial<StepInput> = {}): StepInput => ({
  profile: { id: "mp_test", provider: c.name, model: c.model, settings: c.settings(server) },
  credential: Option.some(Redacted.make(SECRET)),
  instructions: "Be brief.",
  conversation: [{ type: "user_message", text: "Where is my order?" }],
  ...overrides
})

export const scripted = (steps: ReadonlyArray<unknown>, overrides: Partial<StepInput> = {}): StepInput => ({
  profile: { id: "mp_scripted", provider: "scripted", model: "scripted-1", settings: { steps } },
  credential: Option.none(),
  instructions: "Be brief.",
  conversation: [{ type: "user_message", text: "Hi there" }],
  ...overrides
})

/** Captures every log line (all levels) and every span's attributes while `effect` runs. */
export const observed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const lines: Array<string> = []
    const spans: Array<Tracer.Span> = []
    const base = yield* Effect.tracer
    const tracer = Tracer.make({
      span: (...args) => {
        const span = base.span(...args)
        spans.push(span)
        return span
      },
      context: (f, fiber) => base.context(f, fiber)
    })
    const result = yield* effect.pipe(
      Effect.withTracer(tracer),
      Effect.provide(Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, (line) => void lines.push(line)))),
      Logger.withMinimumLogLevel(LogLevel.All)
    )
    const attributes = spans.flatMap((span) => [...span.attributes].map(([key, value]) => `${key}=${String(value)}`))
    return { result, lines, attributes, spans }
  })
