/**
 * Streaming bodies piped by Node after the request's fiber ended (src/Edge/Detached.ts, issue 20):
 * on a bare platform server, the body streams with the head the app answered, the request's fiber
 * ends while the stream is open, a client that goes away destroys the body, and a response replaced
 * after the swap is written as it is (its body destroyed); through the service, an SSE stream
 * carries the pipeline's headers and ends after the run's terminal event.
 */
import { HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { expect, it, layer } from "@effect/vitest"
import { Deferred, Effect, Layer, Queue } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { Readable } from "node:stream"

import { detach, detachStreams } from "../src/Edge/Detached.js"
import { makeTestApp, TestApp } from "./support/App.js"
import { expectSingle } from "./support/Envelopes.js"
import { scriptedSandbox } from "./support/Sandboxes.js"

/**
 * A platform server on 127.0.0.1 serving `app` (with the detaching middleware): its URL, and an
 * effect that waits for a request's fiber to end (the server's middleware wraps the response's
 * writing, so it ends when the platform has written the response).
 */
const serve = <E>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, HttpServerRequest.HttpServerRequest>) =>
  Effect.gen(function*() {
    const server = createServer()
    const fibersEnded = yield* Queue.unbounded<void>()
    yield* Layer.build(
      HttpServer.serve(detachStreams(app), (handled) => Effect.ensuring(handled, Queue.offer(fibersEnded, undefined))).pipe(
        Layer.provide(NodeHttpServer.layer(() => server, { port: 0, host: "127.0.0.1" }))
      )
    )
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, fiberEnded: Queue.take(fibersEnded) }
  })

/** A body that stays open until pushed to, and says when it is destroyed. */
const openBody = () => {
  const destroyed = Deferred.unsafeMake<void>(undefined as any)
  const body = new Readable({
    read() {},
    destroy(error, callback) {
      Deferred.unsafeDone(destroyed, Effect.void)
      callback(error)
    }
  })
  return { body, destroyed }
}

it.scoped("the body streams with the app's head, and the request's fiber ends while it is open", () =>
  Effect.gen(function*() {
    const { body } = openBody()
    const { fiberEnded, url } = yield* serve(
      Effect.succeed(HttpServerResponse.raw(body, { contentType: "text/event-stream", headers: { "x-test": "kept" } }))
    )
    const response = yield* Effect.promise(() => fetch(url))
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("text/event-stream")
    expect(response.headers.get("x-test")).toBe("kept")
    // the fiber ended with the body still open (the platform alone would wait for the body's end)
    yield* fiberEnded.pipe(Effect.timeout("5 seconds"))
    const reader = response.body!.getReader()
    body.push("data: one\n\n")
    const first = yield* Effect.promise(() => reader.read())
    expect(new TextDecoder().decode(first.value)).toBe("data: one\n\n")
    body.push(null)
    const rest = yield* Effect.promise(() => reader.read())
    expect(rest.done).toBe(true)
  }))

it.scoped("a client that goes away destroys the body", () =>
  Effect.gen(function*() {
    const { body, destroyed } = openBody()
    const { url } = yield* serve(Effect.succeed(HttpServerResponse.raw(body, { contentType: "text/event-stream" })))
    const controller = new AbortController()
    const response = yield* Effect.promise(() => fetch(url, { signal: controller.signal }))
    expect(response.status).toBe(200)
    controller.abort()
    yield* Deferred.await(destroyed).pipe(Effect.timeout("5 seconds"))
    expect(body.destroyed).toBe(true)
  }))

it.scoped("a response replaced after the swap is written as it is, and the streaming body is destroyed", () =>
  Effect.gen(function*() {
    const { body, destroyed } = openBody()
    const replaced = HttpServerResponse.text("instead", { status: 503 })
    const app = Effect.flatMap(
      Effect.succeed(HttpServerResponse.raw(body, { contentType: "text/event-stream" })),
      (streaming) =>
        // detached first (as an inner middleware could), then replaced by an outer one
        Effect.map(HttpServerRequest.HttpServerRequest, (request) => (detach(request, streaming), replaced))
    )
    const { url } = yield* serve(app)
    const response = yield* Effect.promise(() => fetch(url))
    expect(response.status).toBe(503)
    expect(yield* Effect.promise(() => response.text())).toBe("instead")
    yield* Deferred.await(destroyed).pipe(Effect.timeout("5 seconds"))
  }))

layer(makeTestApp(), { excludeTestServices: true, timeout: "60 seconds" })("through the service", (it) => {
  it.effect("an SSE stream carries the pipeline's headers, its frames, and ends after the terminal event", () =>
    Effect.gen(function*() {
      const app = yield* TestApp
      const s = yield* scriptedSandbox([{ type: "text", text: "streamed" }])
      const run = expectSingle(yield* s.startRun((yield* s.conversation()).id, "go", { headers: { prefer: "wait=10" } }))
      const response = yield* Effect.promise(() =>
        fetch(`${app.baseUrl}${s.P}/runs/${run.id}/events/stream`, { headers: { authorization: `Bearer ${s.key}` } })
      )
      expect(response.status).toBe(200)
      expect(response.headers.get("content-type")).toBe("text/event-stream")
      expect(response.headers.get("x-accel-buffering")).toBe("no")
      expect(response.headers.get("x-request-id")).toMatch(/^req_/)
      expect(response.headers.get("ratelimit")).not.toBeNull()
      // the whole body: the run ended, so the stream ends after its terminal event
      const text = yield* Effect.promise(() => response.text()).pipe(Effect.timeout("10 seconds"))
      const types = [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1])
      expect(types).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
    }))
})
