/**
 * The HTTP server with limits suited to a public API (D19), all from `AppConfig.edge`: request
 * headers within `HTTP_HEADERS_TIMEOUT_SECONDS` and the whole request within
 * `HTTP_REQUEST_TIMEOUT_SECONDS` (responses, so event streams, are not limited), idle keep-alive
 * connections closed after `HTTP_KEEP_ALIVE_TIMEOUT_SECONDS`, at most `HTTP_MAX_CONNECTIONS` open
 * connections. A request the HTTP parser refuses (a malformed request line or header, a header
 * value holding U+0000) is answered with the error envelope and the connection closed.
 */
import { createServer } from "node:http"
import type { Socket } from "node:net"

import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"

import { AppConfig, type AppConfigShape } from "../Config/AppConfig.js"
import { toEnvelope } from "../Kernel/Errors.js"
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

export const makeServer = (config: AppConfigShape) => () => {
  const server = createServer({
    headersTimeout: config.edge.headersTimeoutSeconds * 1000,
    requestTimeout: config.edge.requestTimeoutSeconds * 1000,
    keepAliveTimeout: config.edge.keepAliveTimeoutSeconds * 1000,
    // How often Node enforces the two timeouts above (its default, 30 s, would let a slow client
    // hold a connection up to 30 s past them).
    connectionsCheckingInterval: Math.min(1000, config.edge.headersTimeoutSeconds * 1000)
  })
  server.maxConnections = config.edge.maxConnections
  server.on("clientError", refuseMalformed)
  return server
}

/** The server on `HOST:PORT`. */
export const ServerLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => NodeHttpServer.layer(makeServer(config), { port: config.port, host: config.host }))
)
