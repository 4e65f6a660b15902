/**
 * The HTTP server after the process stood still (issue 41): a request that reached a connection
 * while the process was paused is answered, not refused 408, although Node judges its timeout
 * before it reads the socket; a client that sends part of a request and stops is still cut off.
 * The pause is a busy wait of the test process itself, begun once the server accepted the
 * connection and the client wrote (so Node's parser started the connection's clock before it).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { AddressInfo } from "node:net"
import * as net from "node:net"
import { AppConfig, defaultEdgeConfig } from "../src/Config/AppConfig.js"
import { makeServer } from "../src/Edge/Server.js"

const HEADERS_TIMEOUT_MS = 1000
const REQUEST_TIMEOUT_MS = 2000

/** Writes `payload` on a fresh connection, stands still for `pauseMs`, then reads the answer. */
const pausedExchange = (payload: string, pauseMs: number) =>
  Effect.promise(() =>
    new Promise<{ answer: string; ms: number }>((resolve) => {
      const server = makeServer(AppConfig.defaults({
        edge: { ...defaultEdgeConfig, headersTimeoutSeconds: HEADERS_TIMEOUT_MS / 1000, requestTimeoutSeconds: REQUEST_TIMEOUT_MS / 1000 }
      }))()
      server.on("request", (_req, res) => res.end("served"))
      server.listen(0, "127.0.0.1", () => {
        let ready = 0
        let began = 0
        let answer = ""
        const client = net.connect((server.address() as AddressInfo).port, "127.0.0.1", () => both())
        // once the server accepted and the client is connected: write, then the process stands still
        const both = () => {
          if (++ready < 2) return
          client.write(payload)
          began = Date.now()
          while (Date.now() - began < pauseMs);
        }
        server.on("connection", both)
        client.on("data", (d: Buffer) => (answer += d.toString("utf8")))
        client.on("close", () => {
          server.close()
          resolve({ answer, ms: Date.now() - began })
        })
        client.on("end", () => client.end())
      })
    })
  )

describe("the HTTP server after a pause", () => {
  it.live("a request that arrived while the process stood still is served; a partial one is still cut off", () =>
    Effect.gen(function*() {
      const whole = yield* pausedExchange("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 1500)
      expect(whole.answer.split("\r\n")[0]).toBe("HTTP/1.1 200 OK")
      expect(whole.answer).toContain("served")

      const partial = yield* pausedExchange("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", 1500)
      expect(partial.answer).not.toContain("served")
      // cut off one request timeout after the pause (plus Node's checking interval, 1 s, and a margin)
      expect(partial.ms).toBeLessThan(1500 + 1000 + REQUEST_TIMEOUT_MS + 3000)
    }))
})
