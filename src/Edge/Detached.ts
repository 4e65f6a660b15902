/**
 * Streaming bodies (an SSE stream: a Node `Readable`) served by Node after the request's fiber has
 * ended (issue 20: 10,000 idle SSE streams at 20 KiB each).
 *
 * `@effect/platform-node` writes a streaming body with `pipeline(body, response)` inside the
 * request's fiber, which stays suspended until the body ends: with its context (copies of a map of
 * every service), the continuation stack of every middleware and their closures, about 40 KiB of
 * heap per idle stream, for as long as the stream is open. Here such a response's body is swapped
 * for a token: the platform writes the head as usual (status, every header the pipeline set) and
 * "ends" the response with the token, which this takes as the moment to pipe the body into the Node
 * response itself. The fiber then completes; the stream holds only what it needs.
 *
 * A client that goes away (the response closes) destroys the body, which lets its cell slot and
 * bus listener go; the body ending ends the response. A response that was replaced
 * after this swapped it (the token never reaches `end`) is written as it is, its body destroyed.
 */
import { HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import type { ServerResponse } from "node:http"
import { Readable } from "node:stream"

/** What the platform "ends" a detached response with. */
const TOKEN = new Uint8Array(0)

/**
 * `close` listeners a detached response keeps (the server's in-flight count: `Edge/Server.ts`); the
 * platform's own is removed (below).
 */
export const keptOnClose = new WeakSet<(...args: Array<any>) => void>()

/**
 * The responses that are event streams: they end with their cells, so a stopping server does not
 * wait for them (the platform writes the head with `writeHead`, which `getHeader` does not see).
 */
export const eventStreams = new WeakSet<ServerResponse>()

/** The response for `request` with its streaming body piped by Node once the platform wrote its head. */
export const detach = (
  request: HttpServerRequest.HttpServerRequest,
  response: HttpServerResponse.HttpServerResponse
): HttpServerResponse.HttpServerResponse => {
  const { body } = response
  if (body._tag !== "Raw" || !(body.body instanceof Readable) || request.method === "HEAD") return response
  const stream = body.body
  const raw: ServerResponse = NodeHttpServerRequest.toServerResponse(request)
  if (String(response.headers["content-type"] ?? "").startsWith("text/event-stream")) eventStreams.add(raw)
  const end = raw.end
  raw.end = function(this: ServerResponse, ...args: Array<any>) {
    // once: the response's own `end` from now on (the pipe ends the response with it). Assigned
    // back, not deleted: a deleted property would turn the response into a slow dictionary object
    // (3 KiB more per open stream).
    raw.end = end
    if (args[0] !== TOKEN) {
      stream.destroy()
      return raw.end(...args)
    }
    raw.flushHeaders()
    // The platform's own `close` listener interrupts the request's fiber, which is ending now; it
    // would keep that fiber (its refs, its answer) as long as the stream is open. The server's own
    // (its in-flight count) stays: without it a stop waited for every stream ever served.
    const kept = raw.rawListeners("close").filter((l) => keptOnClose.has((l as { listener?: any }).listener ?? l))
    raw.removeAllListeners("close")
    for (const listener of kept) raw.on("close", listener as (...args: Array<any>) => void)
    // `pipe` rather than `stream.pipeline`: the same ending both ways for fewer listeners per open
    // stream (pipeline's end-of-stream watchers on both sides held about 7 KiB of heap per stream).
    stream.pipe(raw)
    raw.once("close", () => stream.destroy())
    const done = args.find((a) => typeof a === "function")
    if (done !== undefined) process.nextTick(done)
    return raw
  } as ServerResponse["end"]
  return HttpServerResponse.raw(TOKEN, { status: response.status, headers: response.headers, cookies: response.cookies })
}

/** Detaches every streaming body the app answers with (the outermost middleware). */
export const detachStreams = HttpMiddleware.make((app) =>
  Effect.flatMap(app, (response) => Effect.map(HttpServerRequest.HttpServerRequest, (request) => detach(request, response)))
)
