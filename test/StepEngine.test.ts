/**
 * The step engine against local HTTP servers on 127.0.0.1 that speak the providers' wire formats
 * (OpenAI Responses, Anthropic Messages): text, usage, the provider request id, and 401/429/500/
 * malformed responses as typed errors; credentials sent as the provider's header and never in an
 * error. The scripted model goes through the same engine.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted } from "effect"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { StepEngine } from "../src/Models/StepEngine.js"

interface Canned {
  readonly status: number
  readonly headers?: Record<string, string>
  readonly body: string
}
interface Recorded {
  readonly path: string
  readonly headers: IncomingMessage["headers"]
  readonly body: any
}

/** A provider on 127.0.0.1 answering with the queued responses, recording each request. */
const provider = (responses: Array<Canned>) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ url: string; requests: Array<Recorded>; close: () => Promise<void> }>((resolve) => {
        const requests: Array<Recorded> = []
        const server = createServer((req, res) => {
          let raw = ""
          req.on("data", (c) => (raw += c))
          req.on("end", () => {
            requests.push({ path: req.url ?? "", headers: req.headers, body: raw ? JSON.parse(raw) : undefined })
            const next = responses.shift() ?? { status: 500, body: "{}" }
            res.writeHead(next.status, { "content-type": "application/json", ...next.headers })
            res.end(next.body)
          })
        })
        server.listen(0, "127.0.0.1", () =>
          resolve({
            url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
            requests,
            close: () => new Promise((r) => server.close(() => r()))
          }))
      })
    ),
    (p) => Effect.promise(p.close)
  )

const engineAt = (env: Record<string, string>) =>
  StepEngine.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))

const SECRET = "sk-proj-wire-test-credential-0123456789"
const conversation = [{ type: "user_message" as const, text: "Hi there" }]
const input = (provider: string, model: string) => ({
  profile: { id: "mp_1", provider, model, settings: {} },
  credential: Option.some(Redacted.make(SECRET)),
  instructions: "Be brief.",
  conversation
})

const openAiResponse = (text: string) =>
  JSON.stringify({
    id: "resp_abc123",
    object: "response",
    created_at: 1_700_000_000,
    status: "completed",
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model: "gpt-4o-mini",
    output: [{
      type: "message",
      id: "msg_1",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text, annotations: [] }]
    }],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage: {
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 3,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 15
    },
    user: null,
    metadata: {}
  })

const anthropicResponse = (text: string) =>
  JSON.stringify({
    id: "msg_01XYZ",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content: [{ type: "text", text }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 20, output_tokens: 4 }
  })

describe("step engine over the wire", () => {
  it.scoped("openai (Responses API): final text, usage, request body and Bearer credential", () =>
    Effect.gen(function*() {
      const server = yield* provider([{ status: 200, headers: { "x-request-id": "req_openai_1" }, body: openAiResponse("Hello back") }])
      const engine = yield* Effect.provide(StepEngine, engineAt({ OPENAI_BASE_URL: server.url }))
      const result = yield* engine.step(input("openai", "gpt-4o-mini"))
      expect(result).toMatchObject({ _tag: "Final", text: "Hello back", usage: { input_tokens: 12, output_tokens: 3, model_calls: 1 } })
      expect(server.requests).toHaveLength(1)
      const req = server.requests[0]!
      expect(req.path).toBe("/responses")
      expect(req.headers.authorization).toBe(`Bearer ${SECRET}`)
      expect(req.body.model).toBe("gpt-4o-mini")
      expect(JSON.stringify(req.body.input)).toContain("Hi there")
      expect(JSON.stringify(req.body)).toContain("Be brief.")
    }))

  it.scoped("anthropic (Messages API): final text, usage, x-api-key credential", () =>
    Effect.gen(function*() {
      const server = yield* provider([{ status: 200, headers: { "request-id": "req_anthropic_1" }, body: anthropicResponse("Bonjour") }])
      const engine = yield* Effect.provide(StepEngine, engineAt({ ANTHROPIC_BASE_URL: server.url }))
      const result = yield* engine.step(input("anthropic", "claude-sonnet-4-5"))
      expect(result).toMatchObject({ _tag: "Final", text: "Bonjour", usage: { input_tokens: 20, output_tokens: 4, model_calls: 1 } })
      const req = server.requests[0]!
      expect(req.path.split("?")[0]).toBe("/v1/messages")
      expect(req.headers["x-api-key"]).toBe(SECRET)
      expect(req.body.system === "Be brief." || JSON.stringify(req.body.system).includes("Be brief.")).toBe(true)
      expect(req.body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "Hi there" }] }])
    }))

  // Each provider's own error body shape.
  const errorBody = (name: string, type: string, message: string) =>
    JSON.stringify(name === "anthropic" ? { type: "error", error: { type, message } } : { error: { message, type, code: null, param: null } })

  for (const [name, env, model, idHeader] of [
    ["openai", "OPENAI_BASE_URL", "gpt-4o-mini", "x-request-id"],
    ["anthropic", "ANTHROPIC_BASE_URL", "claude-sonnet-4-5", "request-id"]
  ] as const) {
    it.scoped(`${name}: 429, 500, 401 and a malformed body become typed errors with the provider request id`, () =>
      Effect.gen(function*() {
        const server = yield* provider([
          { status: 429, headers: { [idHeader]: "req_limited", "retry-after": "7" }, body: errorBody(name, "rate_limit_error", "slow down") },
          { status: 500, headers: { [idHeader]: "req_broken" }, body: errorBody(name, "api_error", "oops") },
          { status: 401, headers: { [idHeader]: "req_auth" }, body: errorBody(name, "authentication_error", "bad key") },
          { status: 200, headers: { [idHeader]: "req_garbled" }, body: "{not json" }
        ])
        const engine = yield* Effect.provide(StepEngine, engineAt({ [env]: server.url }))
        const attempt = Effect.flip(engine.step(input(name, model)))
        const limited = yield* attempt
        expect(limited).toMatchObject({ _tag: "ModelRateLimited", provider: name, provider_request_id: "req_limited", retry_after_seconds: 7 })
        expect(yield* attempt).toMatchObject({ _tag: "ModelUnavailable", provider_request_id: "req_broken" })
        expect(yield* attempt).toMatchObject({ _tag: "ModelAuthFailed", provider_request_id: "req_auth" })
        const garbled = yield* attempt
        expect(["ModelInvalidResponse", "ModelUnavailable"]).toContain(garbled._tag)
        for (const e of [limited, garbled]) expect(JSON.stringify(e)).not.toContain(SECRET)
      }))
  }

  const chatCompletion = (message: Record<string, unknown>, finish: string) =>
    JSON.stringify({
      id: "chatcmpl-42",
      object: "chat.completion",
      created: 1_700_000_000,
      model: "llama3",
      choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish, logprobs: null }],
      usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 }
    })

  it.scoped("openai_compatible (Chat Completions at settings.base_url): text, usage, history mapping, optional key", () =>
    Effect.gen(function*() {
      const server = yield* provider([
        { status: 200, body: chatCompletion({ content: "Local hello" }, "stop") },
        { status: 200, body: chatCompletion({ content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "x", arguments: "{oops" } }] }, "tool_calls") },
        { status: 503, headers: { "x-request-id": "req_busy" }, body: errorBody("openai", "server_error", "busy") }
      ])
      const engine = yield* Effect.provide(StepEngine, engineAt({}))
      const local = {
        profile: { id: "mp_c", provider: "openai_compatible", model: "llama3", settings: { base_url: `${server.url}/v1/` } },
        credential: Option.none<Redacted.Redacted<string>>(),
        instructions: "Be brief.",
        conversation: [
          { type: "user_message" as const, text: "first" },
          { type: "assistant_message" as const, text: "answer" },
          { type: "user_message" as const, text: "second" }
        ]
      }
      const result = yield* engine.step(local)
      expect(result).toMatchObject({ _tag: "Final", text: "Local hello", usage: { input_tokens: 9, output_tokens: 2, model_calls: 1 } })
      const req = server.requests[0]!
      expect(req.path).toBe("/v1/chat/completions")
      expect(req.headers.authorization).toBeUndefined()
      expect(req.body.model).toBe("llama3")
      expect(req.body.messages).toEqual([
        { role: "system", content: "Be brief." },
        { role: "user", content: "first" },
        { role: "assistant", content: "answer" },
        { role: "user", content: "second" }
      ])
      // Unparseable tool-call arguments are an invalid response, not a crash.
      expect(yield* Effect.flip(engine.step(local))).toMatchObject({ _tag: "ModelInvalidResponse" })
      expect(yield* Effect.flip(engine.step(local))).toMatchObject({ _tag: "ModelUnavailable", provider_request_id: "req_busy" })
    }))

  const LOOKUP = {
    name: "lookup_order",
    description: "Find an order",
    input_schema: {
      type: "object",
      properties: { order_id: { type: "string", pattern: "^o_" } },
      required: ["order_id"],
      additionalProperties: false
    }
  }
  const withTool = (name: string, model: string, settings: Record<string, unknown> = {}) => ({
    ...input(name, model),
    profile: { id: "mp_t", provider: name, model, settings },
    tools: [LOOKUP]
  })

  it.scoped("a tool call from each provider is returned unexecuted, with the customer's JSON Schema in the request", () =>
    Effect.gen(function*() {
      const openai = yield* provider([{
        status: 200,
        body: JSON.stringify({
          ...JSON.parse(openAiResponse("")),
          output: [{ type: "function_call", id: "fc_1", call_id: "call_oa", name: "lookup_order", arguments: "{\"order_id\":\"o_1\"}", status: "completed" }]
        })
      }])
      const anthropic = yield* provider([{
        status: 200,
        body: JSON.stringify({
          ...JSON.parse(anthropicResponse("")),
          content: [{ type: "text", text: "Let me look." }, { type: "tool_use", id: "toolu_1", name: "lookup_order", input: { order_id: "o_2" } }],
          stop_reason: "tool_use"
        })
      }])
      const compatible = yield* provider([{
        status: 200,
        body: chatCompletion({
          content: null,
          tool_calls: [{ id: "call_cc", type: "function", function: { name: "lookup_order", arguments: "{\"order_id\":\"o_3\"}" } }]
        }, "tool_calls")
      }])
      const engine = yield* Effect.provide(StepEngine, engineAt({ OPENAI_BASE_URL: openai.url, ANTHROPIC_BASE_URL: anthropic.url }))
      expect(yield* engine.step(withTool("openai", "gpt-4o-mini"))).toMatchObject({
        _tag: "ToolCalls",
        calls: [{ call_id: "call_oa", name: "lookup_order", input: { order_id: "o_1" } }]
      })
      expect(yield* engine.step(withTool("anthropic", "claude-sonnet-4-5"))).toMatchObject({
        _tag: "ToolCalls",
        text: "Let me look.",
        calls: [{ call_id: "toolu_1", name: "lookup_order", input: { order_id: "o_2" } }]
      })
      expect(yield* engine.step(withTool("openai_compatible", "llama3", { base_url: compatible.url }))).toMatchObject({
        _tag: "ToolCalls",
        calls: [{ call_id: "call_cc", name: "lookup_order", input: { order_id: "o_3" } }]
      })
      // The customer's schema, as given, is what each provider was offered.
      const schemaOf = (body: any) => JSON.stringify(body.tools[0])
      expect(schemaOf(openai.requests[0]!.body)).toContain('"pattern":"^o_"')
      expect(anthropic.requests[0]!.body.tools[0]).toMatchObject({ name: "lookup_order", input_schema: { required: ["order_id"] } })
      expect(compatible.requests[0]!.body.tools[0]).toMatchObject({
        type: "function",
        function: { name: "lookup_order", description: "Find an order", parameters: { required: ["order_id"] } }
      })
      // A scripted tool_call step through the same toolkit.
      const scripted = yield* engine.step(withTool("scripted", "scripted-1", {
        steps: [{ type: "tool_call", tool: "lookup_order", input: { order_id: "o_4" } }]
      }))
      expect(scripted).toMatchObject({ _tag: "ToolCalls", calls: [{ name: "lookup_order", input: { order_id: "o_4" } }] })
    }))

  it.scoped("history with a tool call and its result is sent in each provider's format", () =>
    Effect.gen(function*() {
      const compatible = yield* provider([{ status: 200, body: chatCompletion({ content: "Shipped." }, "stop") }])
      const engine = yield* Effect.provide(StepEngine, engineAt({}))
      const result = yield* engine.step({
        ...withTool("openai_compatible", "llama3", { base_url: compatible.url }),
        conversation: [
          { type: "user_message", text: "Where is o_1?" },
          { type: "tool_call", call_id: "call_9", name: "lookup_order", input: { order_id: "o_1" } },
          { type: "tool_result", call_id: "call_9", name: "lookup_order", output: { status: "shipped" }, is_error: false }
        ]
      })
      expect(result).toMatchObject({ _tag: "Final", text: "Shipped." })
      expect(compatible.requests[0]!.body.messages.slice(1)).toEqual([
        { role: "user", content: "Where is o_1?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_9", type: "function", function: { name: "lookup_order", arguments: "{\"order_id\":\"o_1\"}" } }] },
        { role: "tool", tool_call_id: "call_9", content: "{\"status\":\"shipped\"}" }
      ])
    }))

  it.effect("a provider that cannot be reached is ModelUnavailable; a missing credential is ModelAuthFailed", () =>
    Effect.gen(function*() {
      const engine = yield* Effect.provide(StepEngine, engineAt({ OPENAI_BASE_URL: "http://127.0.0.1:1" }))
      expect(yield* Effect.flip(engine.step(input("openai", "gpt-4o-mini")))).toMatchObject({ _tag: "ModelUnavailable" })
      const noKey = { ...input("anthropic", "claude"), credential: Option.none() }
      expect(yield* Effect.flip(engine.step(noKey))).toMatchObject({ _tag: "ModelAuthFailed" })
    }))

  it.effect("scripted through the same engine: text with {{input}}, usage in words, fail as ModelFailed", () =>
    Effect.gen(function*() {
      const engine = yield* Effect.provide(StepEngine, engineAt({}))
      const scripted = (steps: unknown) => ({ ...input("scripted", "scripted-1"), profile: { id: "mp_s", provider: "scripted", model: "scripted-1", settings: { steps } } })
      const ok = yield* engine.step(scripted([{ type: "text", text: "echo {{input}}" }]))
      expect(ok).toMatchObject({ _tag: "Final", text: "echo Hi there", usage: { input_tokens: 4, output_tokens: 3, model_calls: 1 } })
      expect(yield* Effect.flip(engine.step(scripted([{ type: "fail", message: "nope" }])))).toMatchObject({ _tag: "ModelFailed", message: "nope" })
    }))
})
