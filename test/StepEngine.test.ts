/**
 * The step engine against local servers on 127.0.0.1 speaking each provider's wire format
 * (test/support/ModelServers.ts): OpenAI Responses, Anthropic Messages and Chat Completions
 * (openai_compatible). For each: a final answer with usage, a tool call (the customer's JSON Schema
 * in the request, the call's input decoded), history with tool calls and results in the provider's
 * format, and 429 / 500 / malformed / 401 as typed errors with the provider's request id; the
 * credential goes out as the provider's header and never shows in an error, a log line or a span.
 * The scripted model goes through the same engine, its sleeps on TestClock.
 */
import * as Prompt from "@effect/ai/Prompt"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Fiber, Logger, LogLevel, Option, Redacted, Schema, TestClock, Tracer } from "effect"
import { ModelsConfig, type ModelsConfigShape } from "../src/Models/Config.js"
import { type ConversationItem, StepResult, type ToolDefinition } from "../src/Domain/Conversation.js"
import { ModelError } from "../src/Models/Errors.js"
import { toPrompt } from "../src/Models/Prompt.js"
import { StepEngine, type StepInput } from "../src/Models/StepEngine.js"
import * as ModelServers from "./support/ModelServers.js"
import {
  anthropicError,
  anthropicMessages,
  chatCompletions,
  type ModelServer,
  openAiError,
  openAiResponses,
  type Recorded,
  type UsageFigures
} from "./support/ModelServers.js"

const SECRET = "sk-proj-Zq8vT3blbkFJwire-test-credential-0123456789"

/** The customer's tool, with a schema the library would never generate itself. */
const LOOKUP: ToolDefinition = {
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

const HISTORY: ReadonlyArray<ConversationItem> = [
  { type: "user_message", text: "Where is o_1?" },
  { type: "assistant_message", text: "Let me look." },
  { type: "tool_call", call_id: "call_9", name: "lookup_order", input: { order_id: "o_1" } },
  { type: "tool_result", call_id: "call_9", name: "lookup_order", output: { status: "shipped" }, is_error: false }
]

interface Call {
  readonly id: string
  readonly name: string
  readonly input: unknown
}

/** What differs between the three HTTP providers. */
interface ProviderCase {
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

const cases: ReadonlyArray<ProviderCase> = [
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

// ---------------------------------------------------------------------------------------------
// Harness

/** Runs `f` with a model server and an engine whose openai/anthropic base URLs point at it. */
const withServer = <A, E>(
  f: (server: ModelServer, engine: StepEngine) => Effect.Effect<A, E>,
  overrides: Partial<ModelsConfigShape> = {},
  // openai_compatible base URLs are the customer's: the local server is reached only when allowlisted
  destinationAllowlist = "127.0.0.1/32"
) =>
  Effect.gen(function*() {
    const server = yield* ModelServers.make
    return yield* Effect.flatMap(StepEngine, (engine) => f(server, engine)).pipe(
      Effect.provide(StepEngine.layerWith({ openaiBaseUrl: `${server.url}/v1`, anthropicBaseUrl: server.url, ...overrides }, destinationAllowlist))
    )
  })

const inputFor = (c: ProviderCase, server: ModelServer, overrides: Partial<StepInput> = {}): StepInput => ({
  profile: { id: "mp_test", provider: c.name, model: c.model, settings: c.settings(server) },
  credential: Option.some(Redacted.make(SECRET)),
  instructions: "Be brief.",
  conversation: [{ type: "user_message", text: "Where is my order?" }],
  ...overrides
})

const scripted = (steps: ReadonlyArray<unknown>, overrides: Partial<StepInput> = {}): StepInput => ({
  profile: { id: "mp_scripted", provider: "scripted", model: "scripted-1", settings: { steps } },
  credential: Option.none(),
  instructions: "Be brief.",
  conversation: [{ type: "user_message", text: "Hi there" }],
  ...overrides
})

/** Captures every log line (all levels) and every span's attributes while `effect` runs. */
const observed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
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

// ---------------------------------------------------------------------------------------------

describe("step engine: HTTP providers over the wire", () => {
  for (const c of cases) {
    describe(c.name, () => {
      it.scoped("a plain text answer is Final, with usage, the provider request id and the credential header", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({
              path: c.pathname,
              headers: { [c.idHeader]: "req_text_1" },
              body: c.text("Your order ships today.", { usage: { input: 31, output: 5 } })
            })
            const result = yield* engine.step(inputFor(c, server))
            expect(result).toEqual({
              _tag: "Final",
              text: "Your order ships today.",
              usage: { input_tokens: 31, output_tokens: 5, model_calls: 1 },
              provider_request_id: "req_text_1"
            })
            expect(server.requests).toHaveLength(1)
            const request = server.requests[0]!
            expect(request.method).toBe("POST")
            expect(request.pathname).toBe(c.pathname)
            expect(c.credentialSent(request)).toBe(SECRET)
            expect(request.headers.traceparent).toBeUndefined()
            expect(request.body.model).toBe(c.model)
            expect(request.body.tools ?? []).toEqual([])
            expect(JSON.stringify(request.body)).toContain("Where is my order?")
            expect(JSON.stringify(request.body)).toContain("Be brief.")
            if (c.name === "openai") expect(request.body.store).toBe(false)
            if (c.name === "anthropic") {
              expect(request.body.max_tokens).toBe(4096)
              expect(request.headers["anthropic-version"]).toBe("2023-06-01")
              expect(request.headers.authorization).toBeUndefined()
            }
          })
        ))

      it.scoped("without a request id header, the response's own id is kept", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ body: c.text("ok", { id: "resp_or_msg_body_id" }) })
            expect(yield* engine.step(inputFor(c, server))).toMatchObject({ _tag: "Final", provider_request_id: "resp_or_msg_body_id" })
          })
        ))

      it.scoped("a tool call is returned unexecuted; the customer's JSON Schema is what the provider was offered", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({
              path: c.pathname,
              headers: { [c.idHeader]: "req_tool_1" },
              body: c.toolCalls(
                [
                  { id: "call_a", name: "lookup_order", input: { order_id: "o_1", fields: ["eta"] } },
                  { id: "call_b", name: "lookup_order", input: { order_id: "o_2" } }
                ],
                "Checking both."
              )
            })
            const result = yield* engine.step(inputFor(c, server, { tools: [LOOKUP] }))
            expect(result).toMatchObject({
              _tag: "ToolCalls",
              text: "Checking both.",
              calls: [
                { call_id: "call_a", name: "lookup_order", input: { order_id: "o_1", fields: ["eta"] } },
                { call_id: "call_b", name: "lookup_order", input: { order_id: "o_2" } }
              ],
              usage: { model_calls: 1 },
              provider_request_id: "req_tool_1"
            })
            const body = server.requests[0]!.body
            expect(body.tools).toHaveLength(1)
            expect(c.toolSent(body)).toEqual({ name: LOOKUP.name, description: LOOKUP.description, schema: LOOKUP.input_schema })
          })
        ))

      it.scoped("prior tool_call and tool_result items are sent in the provider's own format", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ body: c.text("It shipped.") })
            const result = yield* engine.step(inputFor(c, server, { tools: [LOOKUP], conversation: HISTORY }))
            expect(result).toMatchObject({ _tag: "Final", text: "It shipped." })
            expect(c.historySent(server.requests[0]!.body)).toEqual(c.expectedHistory)
          })
        ))

      it.scoped("429 is ModelRateLimited with the provider request id and retry-after", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({
              status: 429,
              headers: { [c.idHeader]: "req_limited", "retry-after": "7" },
              body: c.error("rate_limit_error", "Rate limit reached for requests")
            })
            const error = yield* Effect.flip(engine.step(inputFor(c, server)))
            expect(error).toMatchObject({
              _tag: "ModelRateLimited",
              provider: c.name,
              provider_request_id: "req_limited",
              retry_after_seconds: 7
            })
            expect(error.message).toContain("429")
          })
        ))

      it.scoped("500 is ModelUnavailable with the provider request id", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ status: 500, headers: { [c.idHeader]: "req_broken" }, body: c.error("api_error", "Internal server error") })
            const error = yield* Effect.flip(engine.step(inputFor(c, server)))
            expect(error).toMatchObject({ _tag: "ModelUnavailable", provider: c.name, provider_request_id: "req_broken" })
            expect(error.retry_after_seconds).toBeUndefined()
          })
        ))

      it.scoped("an error status keeps its meaning when its body is not the provider's (a gateway's own)", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({
              status: 429,
              headers: { "retry-after": "Wed, 21 Oct 2099 07:28:00 GMT", [c.idHeader]: "req_proxy" },
              body: { message: "Too Many Requests" }
            }, {
              status: 403,
              headers: { "content-type": "text/html" },
              body: "<html><body>Forbidden</body></html>"
            })
            const error = yield* Effect.flip(engine.step(inputFor(c, server)))
            expect(error).toMatchObject({ _tag: "ModelRateLimited", provider_request_id: "req_proxy" })
            expect(error.retry_after_seconds).toBeGreaterThan(0)
            expect(yield* Effect.flip(engine.step(inputFor(c, server)))).toMatchObject({ _tag: "ModelAuthFailed" })
          })
        ))

      it.scoped("a body that is not JSON is ModelInvalidResponse", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ status: 200, headers: { [c.idHeader]: "req_garbled" }, body: "{\"id\": \"resp_1\", \"outp" })
            const error = yield* Effect.flip(engine.step(inputFor(c, server)))
            expect(error).toMatchObject({ _tag: "ModelInvalidResponse", provider: c.name, provider_request_id: "req_garbled" })
          })
        ))

      it.scoped("JSON of the wrong shape is ModelInvalidResponse", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ body: { hello: "world" } })
            expect(yield* Effect.flip(engine.step(inputFor(c, server)))).toMatchObject({ _tag: "ModelInvalidResponse" })
          })
        ))

      it.scoped("a call to a tool that was not offered is ModelInvalidResponse", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            const drop = c.toolCalls([{ id: "call_x", name: "drop_tables", input: {} }])
            server.enqueue({ body: drop }, { body: drop })
            expect(yield* Effect.flip(engine.step(inputFor(c, server, { tools: [LOOKUP] })))).toMatchObject({
              _tag: "ModelInvalidResponse"
            })
            expect(yield* Effect.flip(engine.step(inputFor(c, server)))).toMatchObject({ _tag: "ModelInvalidResponse" })
          })
        ))

      it.scoped("401 is ModelAuthFailed; the credential is in no error, log line or span", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue(
              // Providers echo (parts of) a bad key back: here the whole of it.
              { status: 401, headers: { [c.idHeader]: "req_auth" }, body: c.error("authentication_error", `Incorrect API key provided: ${SECRET}`) },
              { status: 400, headers: { [c.idHeader]: "req_bad" }, body: c.error("invalid_request_error", `Unknown parameter near ${SECRET}`) },
              { status: 429, body: c.error("rate_limit_error", `Slow down, ${SECRET}`) },
              { status: 200, body: `not json ${SECRET}` }
            )
            const { attributes, lines, result: errors } = yield* observed(
              Effect.forEach([1, 2, 3, 4], () => Effect.flip(engine.step(inputFor(c, server))))
            )
            expect(errors[0]).toMatchObject({ _tag: "ModelAuthFailed", provider: c.name, provider_request_id: "req_auth" })
            expect(errors[1]).toMatchObject({ _tag: "ModelFailed", provider_request_id: "req_bad" })
            expect(errors[1]!.message).toContain("400")
            expect(errors.map((e) => e._tag)).toEqual(["ModelAuthFailed", "ModelFailed", "ModelRateLimited", "ModelInvalidResponse"])
            for (const request of server.requests) expect(c.credentialSent(request)).toBe(SECRET)
            for (const error of errors) {
              expect(error.message).not.toContain(SECRET)
              expect(JSON.stringify(error)).not.toContain(SECRET)
              expect(String(error)).not.toContain(SECRET)
            }
            // The logs and spans were really captured (each failure is logged; the HTTP spans carry
            // the request headers, redacted), and the credential is in none of them.
            expect(lines.filter((line) => line.includes("model call failed"))).toHaveLength(4)
            expect(lines.join("\n")).toContain("req_auth")
            expect(lines.join("\n")).not.toContain(SECRET)
            const header = c.name === "anthropic" ? "x-api-key" : "authorization"
            expect(attributes.some((a) => a.startsWith(`http.request.header.${header}=`))).toBe(true)
            expect(attributes.some((a) => a.startsWith("model.provider="))).toBe(true)
            expect(attributes.filter((a) => a.includes(SECRET))).toEqual([])
          })
        ))

      it.scoped("the request timeout is ModelUnavailable (on Effect's Clock)", () =>
        withServer(
          (server, engine) =>
            Effect.gen(function*() {
              server.enqueue({ hang: true })
              const fiber = yield* Effect.fork(engine.step(inputFor(c, server)))
              yield* server.nextRequest
              yield* TestClock.adjust("29 seconds")
              expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
              yield* TestClock.adjust("1 second")
              const error = yield* Effect.flip(Fiber.join(fiber))
              expect(error).toMatchObject({ _tag: "ModelUnavailable", provider: c.name })
              expect(error.message).toContain("30 s")
            }),
          { requestTimeoutSeconds: 30 }
        ))
    })
  }

  it.scoped("unparseable tool-call arguments are ModelInvalidResponse (openai, openai_compatible)", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue(
          { body: openAiResponses.functionCalls([{ call_id: "call_1", name: "lookup_order", arguments: "{\"order_id\": " }]) },
          { body: chatCompletions.toolCalls([{ id: "call_2", name: "lookup_order", arguments: "{oops" }]) }
        )
        const [openai, , compatible] = cases
        expect(yield* Effect.flip(engine.step(inputFor(openai!, server, { tools: [LOOKUP] })))).toMatchObject({
          _tag: "ModelInvalidResponse",
          provider: "openai"
        })
        expect(yield* Effect.flip(engine.step(inputFor(compatible!, server, { tools: [LOOKUP] })))).toMatchObject({
          _tag: "ModelInvalidResponse",
          provider: "openai_compatible"
        })
      })
    ))

  it.scoped("a tool call whose input is not a JSON object is ModelInvalidResponse", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue({ body: chatCompletions.toolCalls([{ id: "call_3", name: "lookup_order", arguments: "[1, 2]" }]) })
        expect(yield* Effect.flip(engine.step(inputFor(cases[2]!, server, { tools: [LOOKUP] })))).toMatchObject({
          _tag: "ModelInvalidResponse"
        })
      })
    ))

  it.scoped("openai and anthropic need a credential (ModelAuthFailed, nothing sent); openai_compatible does not", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        const none = { credential: Option.none<Redacted.Redacted<string>>() }
        expect(yield* Effect.flip(engine.step(inputFor(cases[0]!, server, none)))).toMatchObject({ _tag: "ModelAuthFailed", provider: "openai" })
        const blank = { credential: Option.some(Redacted.make("  ")) }
        expect(yield* Effect.flip(engine.step(inputFor(cases[1]!, server, blank)))).toMatchObject({ _tag: "ModelAuthFailed", provider: "anthropic" })
        expect(server.requests).toHaveLength(0)
        server.enqueue({ body: chatCompletions.text("Local hello") })
        expect(yield* engine.step(inputFor(cases[2]!, server, none))).toMatchObject({ _tag: "Final", text: "Local hello" })
        expect(server.requests[0]!.headers.authorization).toBeUndefined()
      })
    ))

  it.scoped("parallel calls and their results: one assistant message, then one tool message per result (chat completions)", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue({ body: chatCompletions.text("Both shipped.") })
        yield* engine.step(inputFor(cases[2]!, server, {
          tools: [LOOKUP],
          conversation: [
            { type: "user_message", text: "o_1 and o_2?" },
            { type: "tool_call", call_id: "c1", name: "lookup_order", input: { order_id: "o_1" } },
            { type: "tool_call", call_id: "c2", name: "lookup_order", input: { order_id: "o_2" } },
            { type: "tool_result", call_id: "c1", name: "lookup_order", output: "shipped", is_error: false },
            { type: "tool_result", call_id: "c2", name: "lookup_order", output: { error: "not found" }, is_error: true },
            { type: "user_message", text: "thanks" }
          ]
        }))
        expect(server.requests[0]!.body.messages.slice(1)).toEqual([
          { role: "user", content: "o_1 and o_2?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "c1", type: "function", function: { name: "lookup_order", arguments: "{\"order_id\":\"o_1\"}" } },
              { id: "c2", type: "function", function: { name: "lookup_order", arguments: "{\"order_id\":\"o_2\"}" } }
            ]
          },
          { role: "tool", tool_call_id: "c1", content: "shipped" },
          { role: "tool", tool_call_id: "c2", content: "{\"error\":\"not found\"}" },
          { role: "user", content: "thanks" }
        ])
      })
    ))

  it.scoped("a provider that cannot be reached is ModelUnavailable", () =>
    withServer(
      (server, engine) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(engine.step(inputFor(cases[0]!, server)))
          expect(error).toMatchObject({ _tag: "ModelUnavailable", provider: "openai" })
          expect(error.message).not.toContain("127.0.0.1")
        }),
      { openaiBaseUrl: "http://127.0.0.1:1/v1" }
    ))

  it.scoped("a redirect is not followed (the credential never goes to another host): ModelFailed", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue({ status: 307, headers: { location: `${server.url}/elsewhere/v1/messages` }, body: "" })
        const error = yield* Effect.flip(engine.step(inputFor(cases[1]!, server)))
        expect(error).toMatchObject({ _tag: "ModelFailed", provider: "anthropic" })
        expect(error.message).toContain("redirect")
        expect(server.requests.map((r) => r.pathname)).toEqual(["/v1/messages"])
      })
    ))

  it.scoped("an openai_compatible error body is not quoted back (the base URL is the customer's choice)", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue(
          { status: 400, body: openAiError("internal-service-secret-detail", "invalid_request_error") },
          { status: 400, body: openAiError("model 'gpt-9' does not exist", "invalid_request_error") }
        )
        const compatible = yield* Effect.flip(engine.step(inputFor(cases[2]!, server)))
        expect(compatible).toMatchObject({ _tag: "ModelFailed", provider: "openai_compatible" })
        expect(compatible.message).not.toContain("internal-service-secret-detail")
        const openai = yield* Effect.flip(engine.step(inputFor(cases[0]!, server)))
        expect(openai.message).toContain("model 'gpt-9' does not exist")
      })
    ))

  it.scoped("anthropic: max_tokens comes from settings.max_tokens when it is a positive integer", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        server.enqueue({ body: anthropicMessages.text("a") }, { body: anthropicMessages.text("b") })
        const base = inputFor(cases[1]!, server)
        yield* engine.step({ ...base, profile: { ...base.profile, settings: { max_tokens: 1024 } } })
        yield* engine.step({ ...base, profile: { ...base.profile, settings: { max_tokens: -5 } } })
        expect(server.requests.map((r) => r.body.max_tokens)).toEqual([1024, 4096])
      })
    ))

  it.scoped("an openai_compatible base_url goes through the destination guard: a local server not allowlisted is never reached", () =>
    withServer(
      (server, engine) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(engine.step(inputFor(cases[2]!, server)))
          expect(error).toMatchObject({ _tag: "ModelUnavailable", provider: "openai_compatible" })
          expect(server.requests).toHaveLength(0)
          // the operator's provider URLs are not customer destinations: the same server answers openai
          server.enqueue({ body: openAiResponses.text("hello") })
          const ok = yield* engine.step(inputFor(cases[0]!, server))
          expect(ok).toMatchObject({ _tag: "Final", text: "hello" })
          expect(server.requests).toHaveLength(1)
        }),
      {},
      ""
    ))

  it.scoped("an openai_compatible profile without a usable base_url is ModelFailed", () =>
    withServer((server, engine) =>
      Effect.gen(function*() {
        const bad = inputFor(cases[2]!, server)
        const error = yield* Effect.flip(engine.step({ ...bad, profile: { ...bad.profile, settings: { base_url: "file:///etc/passwd" } } }))
        expect(error).toMatchObject({ _tag: "ModelFailed", provider: "openai_compatible" })
        expect(server.requests).toHaveLength(0)
      })
    ))
})

describe("step engine: the scripted model", () => {
  it.scoped("text with {{input}}: Final, usage in words", () =>
    withServer((_, engine) =>
      Effect.gen(function*() {
        const result = yield* engine.step(scripted([{ type: "text", text: "echo {{input}}" }]))
        // input: "Be brief." (2) + "Hi there" (2); output: "echo Hi there" (3)
        expect(result).toEqual({ _tag: "Final", text: "echo Hi there", usage: { input_tokens: 4, output_tokens: 3, model_calls: 1 }, provider_request_id: "scripted_0" })
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
          const fiber = yield* Effect.fork(engine.step(scripted([{ type: "sleep", seconds: 5 }, { type: "text", text: "woke up: {{input}}" }])))
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

describe("step engine: prompt, schemas and config", () => {
  it.effect("ModelsConfig reads the environment, with defaults, and refuses bad values", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.withConfigProvider(ModelsConfig.config, ConfigProvider.fromMap(new Map(Object.entries(env))))
      expect(yield* read({})).toEqual(ModelsConfig.defaults())
      expect(ModelsConfig.defaults()).toEqual({
        openaiBaseUrl: "https://api.openai.com/v1",
        anthropicBaseUrl: "https://api.anthropic.com",
        requestTimeoutSeconds: 120
      })
      expect(
        yield* read({
          OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
          ANTHROPIC_BASE_URL: "https://proxy.internal",
          MODEL_REQUEST_TIMEOUT_SECONDS: "30"
        })
      ).toEqual({ openaiBaseUrl: "http://127.0.0.1:9/v1", anthropicBaseUrl: "https://proxy.internal", requestTimeoutSeconds: 30 })
      for (const bad of [{ OPENAI_BASE_URL: "not a url" }, { ANTHROPIC_BASE_URL: "ftp://x" }, { MODEL_REQUEST_TIMEOUT_SECONDS: "0" }]) {
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
    const shape = prompt.content.map((m) =>
      m.role === "system" ? ["system", m.content] : [m.role, m.content.map((p) => p.type)]
    )
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
