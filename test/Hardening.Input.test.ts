/**
 * Hostile and oversized input (D19, issue 14 findings 1, 9 and the low ones), over real HTTP and
 * raw sockets: bodies over 1 MiB refused while reading (declared or chunked) without echo, slow
 * headers cut off, invalid UTF-8, deep JSON, U+0000 and control characters anywhere, unknown
 * fields, long paths; every refusal the D3 envelope, none stored, nothing changed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as net from "node:net"

import { defaultEdgeConfig } from "../src/Config/AppConfig.js"
import { LINGER } from "../src/Edge/Hygiene.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode } from "./support/Envelopes.js"
import { count, IDEMPOTENCY_SCOPES, idemRows } from "./support/Idempotency.js"

const MiB = 1024 * 1024

/**
 * A raw HTTP/1.1 exchange: what the server answered (status line, headers, body) and when the
 * socket closed; with `firstAnswer`, done as soon as one whole answer has come (keep-alive).
 */
const raw = (port: number, send: (socket: net.Socket) => void, timeoutMs = 15_000, firstAnswer = false) =>
  Effect.promise(() =>
    new Promise<{ status: number; head: string; body: string; closed: boolean; ms: number }>((resolve) => {
      const started = Date.now()
      const socket = net.connect(port, "127.0.0.1")
      let data = ""
      let done = false
      const finish = (closed: boolean) => {
        if (done) return
        done = true
        const [head = "", body = ""] = data.split("\r\n\r\n", 2)
        const status = Number(head.match(/^HTTP\/1\.1 (\d{3})/)?.[1] ?? 0)
        socket.destroy()
        resolve({ status, head, body, closed, ms: Date.now() - started })
      }
      socket.setEncoding("latin1")
      socket.on("data", (chunk) => {
        data += chunk
        const length = Number(data.match(/\r\ncontent-length: (\d+)/i)?.[1] ?? NaN)
        if (firstAnswer && data.includes("\r\n\r\n") && data.split("\r\n\r\n", 2)[1]!.length >= length) finish(false)
      })
      socket.on("error", () => finish(true))
      socket.on("close", () => finish(true))
      socket.on("connect", () => send(socket))
      setTimeout(() => finish(false), timeoutMs)
    })
  )

const portOf = Effect.map(TestApp, (app) => Number(new URL(app.baseUrl).port))

describe("request bodies over the limit (D19, finding 1)", () => {
  it.live("a declared 50 MB body is 400 body_too_large before it is sent, with a small envelope; a client that stops sending is closed after the linger", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const port = yield* portOf
      const res = yield* raw(port, (socket) => {
        socket.write(
          `POST ${sb.P}/users HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${sb.key}\r\n` +
            `Idempotency-Key: big-1\r\nContent-Type: application/json\r\nContent-Length: ${50 * 1000 * 1000}\r\n\r\n`
        )
        socket.write(`{"external_id":"${"a".repeat(64 * 1024)}`) // a little of it, then nothing more
      })
      expect(res.status).toBe(400)
      expect(res.body.length).toBeLessThan(1024)
      const body = JSON.parse(res.body)
      expect(body.error).toMatchObject({ type: "invalid_request", code: "body_too_large" })
      expect(res.head).toContain(`x-request-id: ${body.request_id}`)
      expect(res.closed).toBe(true)
      expect(res.ms).toBeLessThan(LINGER.ms + LINGER.closeAfterMs + 2_000)
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "big-1" })).toEqual([])
      expect(yield* count("users", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("clients sending whole oversized bodies all read the 400 (no reset), and a connection whose body was drained serves the next request", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const port = yield* portOf
      const head = (key: string, size: number) =>
        `POST ${sb.P}/users HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${sb.key}\r\n` +
        `Idempotency-Key: ${key}\r\nContent-Type: application/json\r\nContent-Length: ${size}\r\n\r\n`
      const sendAll = (socket: net.Socket, size: number) => {
        const chunk = Buffer.alloc(64 * 1024, "a")
        const next = (sent: number): void => {
          if (sent >= size || socket.destroyed) return
          const piece = sent + chunk.length > size ? chunk.subarray(0, size - sent) : chunk
          if (socket.write(piece)) next(sent + piece.length)
          else socket.once("drain", () => next(sent + piece.length))
        }
        next(0)
      }
      // 16 at once, 8 MB each, sent whole (before the linger, every one of them lost answers to resets)
      const answers = yield* Effect.all(
        Array.from({ length: 16 }, (_, i) =>
          raw(
            port,
            (socket) => {
              socket.write(head(`big-all-${i}`, 8 * 1000 * 1000))
              sendAll(socket, 8 * 1000 * 1000)
            },
            15_000,
            true
          )),
        { concurrency: "unbounded" }
      )
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 400))
      for (const a of answers) expect(JSON.parse(a.body).error.code).toBe("body_too_large")
      // a 2 MB body is drained; the same connection then answers a second request
      const both = yield* raw(port, (socket) => {
        socket.write(head("big-then", 2 * 1000 * 1000))
        socket.write(Buffer.alloc(2 * 1000 * 1000, "a"))
        socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
      })
      expect(both.status).toBe(400)
      expect(both.body).toMatch(/HTTP\/1\.1 200/)
      expect(yield* count("users", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a chunked body is refused once it passes 1 MiB; exactly 1 MiB is read and judged on its content", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const port = yield* portOf
      const chunked = (size: number, key: string) =>
        raw(
          port,
          (socket) => {
            socket.write(
              `POST ${sb.P}/users HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${sb.key}\r\n` +
                `Idempotency-Key: ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`
            )
            const body = `{"external_id":"x","display_name":"${"d".repeat(size - 37)}"}`
            expect(Buffer.byteLength(body)).toBe(size)
            for (let i = 0; i < body.length; i += 64 * 1024) {
              const part = body.slice(i, i + 64 * 1024)
              socket.write(`${part.length.toString(16)}\r\n${part}\r\n`)
            }
            socket.write("0\r\n\r\n")
          },
          15_000,
          true
        )
      const over = yield* chunked(MiB + 1, "chunk-over")
      expect(over.status).toBe(400)
      expect(JSON.parse(over.body).error.code).toBe("body_too_large")
      // at the limit the body is read whole; this one is refused for its display_name (at most 200)
      const at = yield* chunked(MiB, "chunk-at")
      expect(at.status).toBe(400)
      const refused = JSON.parse(at.body)
      expect(refused.error).toMatchObject({ code: "parameter_invalid", param: "display_name" })
      // the refusal never echoes the input
      expect(at.body.length).toBeLessThan(1024)
      expect(yield* count("users", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a client that never finishes its headers is cut off after the headers timeout", () =>
    Effect.gen(function*() {
      const port = yield* portOf
      const res = yield* raw(port, (socket) => socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "), 10_000)
      expect(res.closed).toBe(true)
      expect(res.ms).toBeLessThan(6_000)
      expect([0, 408]).toContain(res.status)
    }).pipe(Effect.provide(makeTestApp({ edge: { ...defaultEdgeConfig, headersTimeoutSeconds: 1, requestTimeoutSeconds: 2 } }))))
})

describe("what a body, a path or a query may hold (D19, finding 9 and the low ones)", () => {
  it.live("U+0000 in a path id, a body string, a cursor or the key set's tenant is 400 (never a 500), and stores nothing", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const cases = [
        yield* request("GET", `${sb.P}/users/user_%00x`, { key: sb.key }),
        yield* request("GET", `${sb.P}/users?cursor=a%00b`, { key: sb.key }),
        yield* request("GET", `/v1/tenants/ten_%00/environments/sandbox/jwks.json`),
        yield* request("POST", `${sb.P}/users`, {
          key: sb.key,
          body: { external_id: "nul\u0000id", display_name: "N" },
          idempotencyKey: "nul-1"
        }),
        yield* request("POST", `${sb.P}/users`, {
          key: sb.key,
          rawBody: `{"external_id":"x","display_name":"a\\u0000b"}`,
          idempotencyKey: "nul-2"
        })
      ]
      for (const res of cases) {
        expectErrorCode(res, 400, "invalid_request")
        expect(res.text).not.toMatch(/\\u0000|\u0000/)
      }
      expect(cases[3]!.body.error.param).toBe("external_id")
      expect(yield* idemRows({ tenantId: sb.tenantId })).toEqual([])
      expect(yield* count("users", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("invalid UTF-8, a lone surrogate and JSON nested deeper than 64 levels are 400 invalid_request; 64 levels pass the check", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const port = yield* portOf
      const invalidUtf8 = yield* raw(port, (socket) => {
        const body = Buffer.concat([Buffer.from(`{"name":"a`), Buffer.from([0xc3, 0x28]), Buffer.from(`"}`)])
        socket.write(
          `POST ${sb.P}/service-actors HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${sb.key}\r\n` +
            `Idempotency-Key: utf8-1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`
        )
        socket.write(body)
      })
      expect(invalidUtf8.status).toBe(400)
      expect(JSON.parse(invalidUtf8.body).error).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/UTF-8/) })
      const surrogate = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, rawBody: `{"name":"a\\ud800b"}` })
      expectErrorCode(surrogate, 400, "invalid_request")
      expect(surrogate.body.error.param).toBe("name")
      const nest = (depth: number) => "[".repeat(depth - 1) + "{}" + "]".repeat(depth - 1)
      const deep = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, rawBody: `{"name":${nest(10_000)}}` })
      expectErrorCode(deep, 400, "invalid_request")
      expect(deep.body.error.message).toMatch(/64 levels/)
      // 64 levels in all (the body object is level 1): past the depth check, refused by the schema
      const atLimit = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, rawBody: `{"name":${nest(63)}}` })
      expectErrorCode(atLimit, 400, "parameter_invalid")
      expect(yield* count("service_actors", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("names refuse control characters; free text keeps tab, LF and CR but nothing else below U+0020", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(["agents:read", "agents:write", ...IDEMPOTENCY_SCOPES])
      for (const name of ["line\nbreak", "tab\there", "esc\u001b[31m", "del\u007f", "c1\u0085"]) {
        const res = yield* request("POST", `${sb.P}/service-actors`, { key: sb.key, body: { name } })
        expectErrorCode(res, 400, name.includes("\u001b") ? "invalid_request" : "parameter_invalid")
        expect(res.body.error.param).toBe("name")
      }
      const ws = (yield* request("POST", `${sb.P}/workspaces`, { key: sb.key, body: { name: "W" } })).body.data
      const profile = (yield* request("POST", `${sb.P}/model-profiles`, {
        key: sb.key,
        body: { name: "S", provider: "scripted", model: "s", settings: { steps: [{ type: "text", text: "ok" }] } }
      })).body.data
      const agent = (yield* request("POST", `${sb.P}/agents`, { key: sb.key, body: { workspace_id: ws.id, name: "A" } })).body.data
      const revision = (instructions: string) =>
        request("POST", `${sb.P}/agents/${agent.id}/revisions`, {
          key: sb.key,
          body: { model_profile_id: profile.id, instructions, tool_ids: [] }
        })
      expect((yield* revision("Line one.\n\tIndented line two.\r\n")).status).toBe(201)
      const bell = yield* revision("ring \u0007")
      expectErrorCode(bell, 400, "invalid_request")
      expect(bell.body.error.param).toBe("instructions")
      expect(yield* count("service_actors", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("an unknown body field is 400 unknown_parameter naming it, at any depth; nothing stored", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const top = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        body: { external_id: "u", display_name: "U", is_admin: true },
        idempotencyKey: "unknown-1"
      })
      expectErrorCode(top, 400, "unknown_parameter")
      expect(top.body.error.param).toBe("is_admin")
      expect(yield* idemRows({ tenantId: sb.tenantId, key: "unknown-1" })).toEqual([])
      // the same key with a valid body executes (the refusal was not stored)
      const ok = yield* request("POST", `${sb.P}/users`, {
        key: sb.key,
        body: { external_id: "u", display_name: "U" },
        idempotencyKey: "unknown-1"
      })
      expect(ok.status).toBe(201)
      expect(yield* count("users", sb.tenantId)).toBe(1)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("a long random path with an Idempotency-Key is an envelope (404 or 400), never a 500, and reserves nothing", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox(IDEMPOTENCY_SCOPES)
      const long = `${sb.P}/users/${"x".repeat(6_000)}/${"y".repeat(6_000)}`
      const res = yield* request("POST", long, { key: sb.key, body: {}, idempotencyKey: "long-path" })
      expect([400, 404]).toContain(res.status)
      expectErrorCode(res, res.status)
      const idUsed = yield* request("DELETE", `${sb.P}/users/${"z".repeat(3_000)}`, { key: sb.key, idempotencyKey: "long-id" })
      expectErrorCode(idUsed, 400, "parameter_invalid")
      expect(yield* idemRows({ tenantId: sb.tenantId })).toEqual([])
    }).pipe(Effect.provide(makeTestApp())))
})
