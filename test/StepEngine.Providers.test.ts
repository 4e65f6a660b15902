/**
 * The step engine against local servers on 127.0.0.1 speaking each provider's wire format
 * (test/support/ModelServers.ts): OpenAI Responses, Anthropic Messages and Chat Completions
 * (openai_compatible). For each: a final answer with usage, a tool call (the customer's JSON Schema
 * in the request, the call's input decoded), history with tool calls and results in the provider's
 * format, and 429 / 500 / malformed / 401 as typed errors with the provider's request id; the
 * credential goes out as the provider's header and never shows in an error, a log line or a span.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option, Redacted, TestClock } from "effect"
import { anthropicMessages, chatCompletions, openAiError, openAiResponses } from "./support/ModelServers.js"
import { cases, HISTORY, inputFor, LOOKUP, observed, SECRET, withServer } from "./support/StepEngineHarness.js"

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

      it.scoped("input files (D13): text as text; an image as the provider's own file input, or a note where it has none", () =>
        withServer((server, engine) =>
          Effect.gen(function*() {
            server.enqueue({ path: c.pathname, body: c.text("Seen.") })
            const png = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex")
            yield* engine.step(inputFor(c, server, {
              conversation: [{
                type: "user_message",
                text: "Look at these",
                files: [
                  { file_id: "file_t", filename: "notes.txt", content_type: "text/plain", bytes: 11 },
                  { file_id: "file_i", filename: "chart.png", content_type: "image/png", bytes: png.length },
                  { file_id: "file_gone", filename: "old.txt", content_type: "text/plain", bytes: 3 }
                ]
              }],
              files: new Map([["file_t", Buffer.from("hello notes")], ["file_i", png]])
            }))
            const sent = JSON.stringify(server.requests[0]!.body)
            expect(sent).toContain("hello notes")
            expect(sent).toContain("deleted, no longer available")
            const base64 = png.toString("base64")
            if (c.name === "openai") expect(sent).toContain(`"type":"input_image"`)
            if (c.name === "anthropic") expect(sent).toContain(`"type":"image"`)
            if (c.name === "openai_compatible") expect(sent).toContain("this model cannot read its content type")
            expect(sent.includes(base64)).toBe(c.name !== "openai_compatible")
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
              {
                status: 401,
                headers: { [c.idHeader]: "req_auth" },
                body: c.error("authentication_error", `Incorrect API key provided: ${SECRET}`)
              },
              {
                status: 400,
                headers: { [c.idHeader]: "req_bad" },
                body: c.error("invalid_request_error", `Unknown parameter near ${SECRET}`)
              },
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
        expect(yield* Effect.flip(engine.step(inputFor(cases[0]!, server, none)))).toMatchObject({
          _tag: "ModelAuthFailed",
          provider: "openai"
        })
        const blank = { credential: Option.some(Redacted.make("  ")) }
        expect(yield* Effect.flip(engine.step(inputFor(cases[1]!, server, blank)))).toMatchObject({
          _tag: "ModelAuthFailed",
          provider: "anthropic"
        })
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
