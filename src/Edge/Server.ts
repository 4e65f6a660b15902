/**
 * The HTTP server with limits suited to a public API (D19), all from `AppConfig.edge`: request
 * headers within `HTTP_HEADERS_TIMEOUT_SECONDS` and the whole request within
 * `HTTP_REQUEST_TIMEOUT_SECONDS` (responses, so event streams, are not limited), idle keep-alive
 * connections closed after `HTTP_KEEP_ALIVE_TIMEOUT_SECONDS`, at most `HTTP_MAX_CONNECTIONS` open
 * connections. A request the HTTP parser refuses (a malformed request line or header, a header
 * value holding U+0000) is answered with the error envelope and the connection closed.
 *
 * Stopping (issue 41): `/readyz` answers 503 for HTTP_DRAIN_SECONDS while requests are still
 * served, then the listener closes and the requests being answered finish; a request that reaches
 * the node after that (on a kept-alive connection) is answered 503 `shutting_down`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { Socket } from "node:net"

import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Context, Duration, Effect, Exit, Layer, Option } from "effect"

import { AppConfig, type AppConfigShape } from "../Config/AppConfig.js"
import { DatabaseLost } from "../Database/Client.js"
import { Draining } from "../Kernel/Draining.js"
import { toEnvelope } from "../Kernel/Errors.js"
import { eventStreams, keptOnClose } from "./Detached.js"
import { newRequestId } from "./RequestIds.js"

/** The answer to a request the parser refused: 400 (or 408 for a request too slow), with the envelope. */
const refuseMalformed = (error: Error & { code?: string }, socket: Socket) => {
  if (!socket.writable) return socket.destroy()
  const slow = error.code === "ERR_HTTP_REQUEST_TIMEOUT"
  const requestId = newRequestId()
  const body = JSON.stringify(
    toEnvelope(
      slow
        ? { code: "request_timeout", message: "The request was not received in time" }
        : { code: "malformed_request", message: "The request is not valid HTTP/1.1 (e.g. a header value holds a control character)" },
      "invalid_request",
      requestId
    )
  )
  socket.end(
    `HTTP/1.1 ${slow ? "408 Request Timeout" : "400 Bad Request"}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-Id: ${requestId}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`
  )
}

/**
 * A request timeout judged right after the process stood still (a long pause, SIGSTOP): Node checks
 * its connections in the timer phase, before it reads what reached the socket meanwhile, so a
 * connection accepted just before the pause was refused 408 although its request had arrived in
 * time (issue 41). The timeout is judged again once the waiting bytes are read (the next turn):
 * a socket that received nothing is refused as before; one that received bytes is spared, and
 * given one more request timeout to deliver its request whole (Node no longer watches it), else
 * its connection is closed.
 */
const judgeAfterPause = (error: Error, socket: Socket, requestTimeoutMs: number) => {
  const before = socket.bytesRead
  setImmediate(() => {
    if (socket.destroyed) return
    if (socket.bytesRead === before) return refuseMalformed(error, socket)
    const watch: { request?: IncomingMessage } = {}
    spared.set(socket, watch)
    setTimeout(() => {
      spared.delete(socket)
      if (!socket.destroyed && watch.request?.complete !== true) socket.destroy()
    }, requestTimeoutMs).unref()
  })
}

/** Sockets spared a request timeout: the first request each received since (`judgeAfterPause`). */
const spared = new WeakMap<Socket, { request?: IncomingMessage }>()

/** The drain's view of the server: whether it is draining, and the requests it is answering. */
interface DrainState {
  draining: boolean
  readonly inFlight: Set<ServerResponse>
}

/** The answer to a request that reaches the server once the service stopped handling requests. */
const refuseStopping = (res: ServerResponse) => {
  const requestId = newRequestId()
  const body = JSON.stringify(
    toEnvelope(
      { code: "shutting_down", message: "This node is stopping: send the request again (to another node)" },
      "unavailable",
      requestId
    )
  )
  res.writeHead(503, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    "retry-after": "1",
    "x-request-id": requestId,
    "cache-control": "no-store",
    connection: "close"
  })
  res.end(body)
}

/**
 * When each request reached the server (its `request` event), before anything of the service ran
 * for it: a request's cell calls give up within the send timeout of this (Pipeline's `served`).
 */
export const arrivals = new WeakMap<IncomingMessage, number>()

export const makeServer = (config: AppConfigShape, state: DrainState = { draining: false, inFlight: new Set() }) => () => {
  const server = createServer({
    headersTimeout: config.edge.headersTimeoutSeconds * 1000,
    requestTimeout: config.edge.requestTimeoutSeconds * 1000,
    keepAliveTimeout: config.edge.keepAliveTimeoutSeconds * 1000,
    // How often Node enforces the two timeouts above (its default, 30 s, would let a slow client
    // hold a connection up to 30 s past them).
    connectionsCheckingInterval: Math.min(1000, config.edge.headersTimeoutSeconds * 1000)
  })
  server.maxConnections = config.edge.maxConnections
  server.on("clientError", (error: Error & { code?: string }, socket: Socket) =>
    error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? judgeAfterPause(error, socket, config.edge.requestTimeoutSeconds * 1000)
      : refuseMalformed(error, socket))
  // Registered first, so it sees each request before the service's handler. While draining, every
  // answer closes its connection (a kept-alive client reconnects, to another node once the load
  // balancer has seen /readyz). Once the service's handler is gone (the platform removes it as it
  // stops, before it closes the server), a request on a kept-alive connection would get no answer:
  // it is answered 503 here (issue 41).
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    arrivals.set(req, Date.now())
    const watch = spared.get(req.socket)
    if (watch !== undefined && watch.request === undefined) watch.request = req
    if (state.draining) res.setHeader("connection", "close")
    if (server.listenerCount("request") === 1) return refuseStopping(res)
    state.inFlight.add(res)
    const answered = () => state.inFlight.delete(res)
    keptOnClose.add(answered)
    res.once("close", answered)
  })
  return server
}

/**
 * The server on `HOST:PORT`, with `Draining` and `ServerDrain`. The drain itself is `DrainLive`'s
 * (main.ts), so a test app built on this layer stops at once.
 */
export const ServerLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => {
    const state: DrainState = { draining: false, inFlight: new Set() }
    let server: Server | undefined
    const make = makeServer(config, state)
    const drain = Effect.gen(function*() {
      state.draining = true
      yield* Effect.logInfo(`draining: /readyz answers 503; the listener closes in ${config.edge.drainSeconds} s`)
      yield* Effect.sleep(Duration.seconds(config.edge.drainSeconds))
      // No new connections; idle kept-alive ones are closed now, busy ones after their answer.
      server?.close()
      server?.closeIdleConnections()
      // The requests being answered finish (event streams excepted: they end with their cells).
      const answering = () => [...state.inFlight].filter((res) => !eventStreams.has(res))
      const deadline = Date.now() + config.edge.requestTimeoutSeconds * 1000
      while (answering().length > 0 && Date.now() < deadline) yield* Effect.sleep(Duration.millis(50))
      yield* Effect.logInfo(`listener closed; ${answering().length} request(s) still being answered`)
    })
    return Layer.mergeAll(
      NodeHttpServer.layer(() => (server = make()), { port: config.port, host: config.host }),
      Layer.succeed(Draining, { draining: Effect.sync(() => state.draining) }),
      Layer.succeed(ServerDrain, { drain })
    )
  })
)

/** Drains the server: `/readyz` 503 for HTTP_DRAIN_SECONDS, then the listener closes (issue 41). */
export class ServerDrain extends Context.Tag("ServerDrain")<ServerDrain, { readonly drain: Effect.Effect<void> }>() {}

/**
 * The first step of stopping (built last in main.ts, so its finalizer runs first): the drain,
 * before the service's handler is removed and its cells stop.
 */
export const DrainLive = Layer.scopedDiscard(Effect.flatMap(ServerDrain, ({ drain }) =>
  Effect.addFinalizer((exit) =>
    // The embedded database died: nothing can be served in a drain window, and the process must
    // stop at once for its supervisor to restart both (stopping 2 s later with the database gone
    // left the process hanging: Startup.NpmStart).
    Exit.isFailure(exit) && Option.exists(Cause.failureOption(exit.cause), (e) => e instanceof DatabaseLost) ? Effect.void : drain
  )))
