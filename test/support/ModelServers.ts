/**
 * Model providers on 127.0.0.1 for tests: one node:http server on an ephemeral port that answers
 * whatever is queued (status, headers, body), in order, and records every request (method, path
 * with query, headers, raw and parsed body). A scoped resource: the server and any connection
 * still open (a response held back with `hang`) are closed when the scope closes.
 *
 * The body builders below produce the providers' real wire formats, in the shapes their docs show
 * and the @effect/ai decoders accept:
 *   - OpenAI Responses (`POST {OPENAI_BASE_URL}/responses`): `openAiResponses`
 *   - OpenAI Chat Completions (`POST {base_url}/chat/completions`): `chatCompletions`
 *   - Anthropic Messages (`POST {ANTHROPIC_BASE_URL}/v1/messages`; @effect/ai-anthropic adds
 *     `?beta=true`): `anthropicMessages`
 * and each provider's error body.
 */
import { Effect, Queue, type Scope } from "effect"
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export interface Canned {
  /** Default 200. */
  readonly status?: number
  readonly headers?: Readonly<Record<string, string>>
  /** A string is sent as is (content-type application/json unless headers say otherwise); anything else as JSON. */
  readonly body?: unknown
  /** Never answer (the connection stays open until the client gives up or the scope closes). */
  readonly hang?: boolean
  /** When set, a request on another path (query ignored) gets a 404 instead, so the test fails visibly. */
  readonly path?: string
}

export interface Recorded {
  readonly method: string
  /** Path with query string, e.g. `/v1/messages?beta=true`. */
  readonly path: string
  /** Path without the query string. */
  readonly pathname: string
  readonly headers: IncomingHttpHeaders
  readonly raw: string
  /** The JSON body, or undefined when there is none or it is not JSON. */
  readonly body: any
}

export interface ModelServer {
  /** `http://127.0.0.1:<port>` (no trailing slash). */
  readonly url: string
  /** Every request so far, in arrival order. */
  readonly requests: ReadonlyArray<Recorded>
  /** Queues responses, answered in order; with none queued a request gets a 500 OpenAI-style error body. */
  readonly enqueue: (...responses: ReadonlyArray<Canned>) => void
  /** Waits for the next request not yet taken (in arrival order). */
  readonly nextRequest: Effect.Effect<Recorded>
}

const send = (res: ServerResponse, canned: Canned) => {
  const body = canned.body === undefined ? "" : typeof canned.body === "string" ? canned.body : JSON.stringify(canned.body)
  res.writeHead(canned.status ?? 200, { "content-type": "application/json", ...canned.headers })
  res.end(body)
}

/** A model server for the current scope. */
export const make: Effect.Effect<ModelServer, never, Scope.Scope> = Effect.gen(function*() {
  const arrivals = yield* Queue.unbounded<Recorded>()
  const queued: Array<Canned> = []
  const requests: Array<Recorded> = []
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8")
      let body: unknown
      try {
        body = raw === "" ? undefined : JSON.parse(raw)
      } catch {
        body = undefined
      }
      const path = req.url ?? "/"
      const recorded: Recorded = {
        method: req.method ?? "",
        path,
        pathname: path.split("?")[0]!,
        headers: req.headers,
        raw,
        body
      }
      requests.push(recorded)
      Queue.unsafeOffer(arrivals, recorded)
      const next = queued.shift()
      if (next === undefined) {
        return send(res, { status: 500, body: openAiError("nothing queued on the test server", "server_error") })
      }
      if (next.path !== undefined && next.path !== recorded.pathname) {
        return send(res, {
          status: 404,
          body: openAiError(`test server expected ${next.path}, got ${recorded.pathname}`, "invalid_request_error")
        })
      }
      if (next.hang) return
      send(res, next)
    })
  })
  const url = yield* Effect.acquireRelease(
    Effect.async<string>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  return {
    url,
    requests,
    enqueue: (...responses) => void queued.push(...responses),
    nextRequest: Queue.take(arrivals)
  }
})

// ---------------------------------------------------------------------------------------------
// OpenAI Responses API

export interface UsageFigures {
  readonly input: number
  readonly output: number
}

const openAiResponse = (
  output: ReadonlyArray<unknown>,
  options: { readonly id?: string | undefined; readonly usage?: UsageFigures | undefined; readonly model?: string | undefined }
) => ({
  id: options.id ?? "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  object: "response",
  created_at: 1_741_476_542,
  status: "completed",
  error: null,
  incomplete_details: null,
  instructions: null,
  max_output_tokens: null,
  model: options.model ?? "gpt-4.1-mini-2025-04-14",
  output,
  parallel_tool_calls: true,
  previous_response_id: null,
  reasoning: { effort: null, summary: null },
  store: false,
  temperature: 1,
  text: { format: { type: "text" } },
  tool_choice: "auto",
  tools: [],
  top_p: 1,
  truncation: "disabled",
  usage: {
    input_tokens: options.usage?.input ?? 36,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: options.usage?.output ?? 87,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: (options.usage?.input ?? 36) + (options.usage?.output ?? 87)
  },
  user: null,
  metadata: {}
})

const outputMessage = (text: string) => ({
  type: "message",
  id: "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
  status: "completed",
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [] }]
})

export const openAiResponses = {
  text: (text: string, options: { readonly id?: string; readonly usage?: UsageFigures } = {}) =>
    openAiResponse([outputMessage(text)], options),
  functionCalls: (
    calls: ReadonlyArray<{ readonly call_id: string; readonly name: string; readonly arguments: string }>,
    options: { readonly text?: string; readonly id?: string; readonly usage?: UsageFigures } = {}
  ) =>
    openAiResponse(
      [
        ...(options.text === undefined ? [] : [outputMessage(options.text)]),
        ...calls.map((call, i) => ({
          type: "function_call",
          id: `fc_67ca09c6bedc8190a7abfec07b1a1332096610f474011cc${i}`,
          call_id: call.call_id,
          name: call.name,
          arguments: call.arguments,
          status: "completed"
        }))
      ],
      options
    )
}

/** OpenAI's (and most compatible servers') error body. */
export const openAiError = (message: string, type: string, code: string | null = null) => ({
  error: { message, type, param: null, code }
})

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions (openai_compatible)

const chatCompletion = (
  message: Record<string, unknown>,
  finishReason: string,
  options: { readonly id?: string | undefined; readonly usage?: UsageFigures | undefined; readonly model?: string | undefined }
) => ({
  id: options.id ?? "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  object: "chat.completion",
  created: 1_741_570_283,
  model: options.model ?? "llama3.1:8b",
  system_fingerprint: "fp_ollama",
  // As Ollama and llama.cpp send it: no `refusal`, no `logprobs`.
  choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finishReason }],
  usage: {
    prompt_tokens: options.usage?.input ?? 19,
    completion_tokens: options.usage?.output ?? 10,
    total_tokens: (options.usage?.input ?? 19) + (options.usage?.output ?? 10)
  }
})

export const chatCompletions = {
  text: (text: string, options: { readonly id?: string; readonly usage?: UsageFigures } = {}) =>
    chatCompletion({ content: text }, "stop", options),
  toolCalls: (
    calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>,
    options: { readonly text?: string; readonly id?: string; readonly usage?: UsageFigures } = {}
  ) =>
    chatCompletion(
      {
        content: options.text ?? null,
        tool_calls: calls.map((call) => ({
          id: call.id,
          type: "function",
          function: { name: call.name, arguments: call.arguments }
        }))
      },
      "tool_calls",
      options
    )
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages API

const anthropicMessage = (
  content: ReadonlyArray<unknown>,
  stopReason: string,
  options: { readonly id?: string | undefined; readonly usage?: UsageFigures | undefined }
) => ({
  id: options.id ?? "msg_013Zva2CMHLNnXjNJJKqJ2EF",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5-20250929",
  content,
  stop_reason: stopReason,
  stop_sequence: null,
  usage: {
    input_tokens: options.usage?.input ?? 2095,
    output_tokens: options.usage?.output ?? 503,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    service_tier: "standard"
  }
})

export const anthropicMessages = {
  text: (text: string, options: { readonly id?: string; readonly usage?: UsageFigures } = {}) =>
    anthropicMessage([{ type: "text", text }], "end_turn", options),
  toolUse: (
    calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: unknown }>,
    options: { readonly text?: string; readonly id?: string; readonly usage?: UsageFigures } = {}
  ) =>
    anthropicMessage(
      [
        ...(options.text === undefined ? [] : [{ type: "text", text: options.text }]),
        ...calls.map((call) => ({ type: "tool_use", id: call.id, name: call.name, input: call.input }))
      ],
      "tool_use",
      options
    )
}

/** Anthropic's error body. */
export const anthropicError = (type: string, message: string) => ({ type: "error", error: { type, message } })
