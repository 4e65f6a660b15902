/**
 * OpenTelemetry traces (issue 15, deliverable 4): the `OTEL_*` variables (off unless an endpoint
 * is set), and the service exporting to a real OTLP/HTTP receiver on 127.0.0.1: a request's
 * server span named by its operation with its SQL beneath it, a scripted run's `model.call`, a
 * run's `tool.call`s (a read, and a write a user approved with an actor token, which no span
 * holds), a provider's failure without what its response echoed, and the default protocol
 * (protobuf) decoded on the wire.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, Layer, Option, Redacted } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { TracingConfig, TracingLive } from "../src/Observability/Tracing.js"
import { makeTestApp } from "./support/App.js"
import { expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { cases, inputFor, SECRET, withServer } from "./support/StepEngineHarness.js"
import { toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"
import { eventually, realSleep } from "./support/Waiting.js"

// ---------------------------------------------------------------------------------------------
// An OTLP/HTTP receiver: POST /v1/traces, JSON or protobuf

interface Span {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string
  readonly name: string
  readonly kind: number
  readonly attributes: Record<string, unknown>
  readonly resource: Record<string, unknown>
}

interface Receiver {
  readonly endpoint: string
  readonly spans: Array<Span>
  readonly posts: Array<
    { readonly path: string; readonly contentType: string; readonly headers: Record<string, unknown>; readonly raw: string }
  >
}

const jsonValue = (v: any): unknown =>
  v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ??
    (v.arrayValue ? (v.arrayValue.values ?? []).map(jsonValue) : undefined)
const jsonAttributes = (list: Array<any> = []) => Object.fromEntries(list.map((a) => [a.key, jsonValue(a.value)]))

const fromJson = (body: any): Array<Span> =>
  (body.resourceSpans ?? []).flatMap((rs: any) =>
    (rs.scopeSpans ?? []).flatMap((ss: any) =>
      (ss.spans ?? []).map((s: any): Span => ({
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? "",
        name: s.name,
        kind: s.kind,
        attributes: jsonAttributes(s.attributes),
        resource: jsonAttributes(rs.resource?.attributes)
      }))
    )
  )

/** The protobuf wire format, just enough of it: field number -> values (varints, bytes). */
const fields = (buf: Buffer) => {
  const out = new Map<number, Array<bigint | Buffer>>()
  let i = 0
  const varint = () => {
    let value = 0n
    for (let shift = 0n;; shift += 7n) {
      const byte = buf[i++]!
      value |= BigInt(byte & 0x7f) << shift
      if (byte < 0x80) return value
    }
  }
  while (i < buf.length) {
    const key = Number(varint())
    const wire = key & 7
    const value = wire === 0
      ? varint()
      : wire === 2
      ? (() => {
        const length = Number(varint())
        return buf.subarray(i, i += length)
      })()
      : buf.subarray(i, i += wire === 1 ? 8 : 4)
    out.set(key >> 3, [...(out.get(key >> 3) ?? []), value])
  }
  return out
}
const bytesOf = (m: Map<number, Array<bigint | Buffer>>, n: number) => (m.get(n) ?? []) as Array<Buffer>
const protoAttributes = (kvs: Array<Buffer>) =>
  Object.fromEntries(kvs.map((kv) => {
    const f = fields(kv)
    const value = fields(bytesOf(f, 2)[0] ?? Buffer.alloc(0))
    const s = bytesOf(value, 1)[0]
    const n = value.get(3)?.[0] as bigint | undefined
    return [
      bytesOf(f, 1)[0]!.toString("utf8"),
      s !== undefined ? s.toString("utf8") : n !== undefined ? Number(n) : value.get(2)?.[0] === 1n
    ]
  }))

const fromProtobuf = (body: Buffer): Array<Span> =>
  bytesOf(fields(body), 1).flatMap((rsBytes) => {
    const rs = fields(rsBytes)
    const resource = protoAttributes(bytesOf(fields(bytesOf(rs, 1)[0] ?? Buffer.alloc(0)), 1))
    return bytesOf(rs, 2).flatMap((ss) =>
      bytesOf(fields(ss), 2).map((spanBytes): Span => {
        const s = fields(spanBytes)
        return {
          traceId: bytesOf(s, 1)[0]!.toString("hex"),
          spanId: bytesOf(s, 2)[0]!.toString("hex"),
          parentSpanId: (bytesOf(s, 4)[0] ?? Buffer.alloc(0)).toString("hex"),
          name: bytesOf(s, 5)[0]!.toString("utf8"),
          kind: Number(s.get(6)?.[0] ?? 0n),
          attributes: protoAttributes(bytesOf(s, 9)),
          resource
        }
      })
    )
  })

const startReceiver = Effect.acquireRelease(
  Effect.promise(() =>
    new Promise<Receiver & { close: () => Promise<void> }>((resolve) => {
      const spans: Array<Span> = []
      const posts: Receiver["posts"] = []
      const server = createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (c: Buffer) => chunks.push(c))
        req.on("end", () => {
          const body = Buffer.concat(chunks)
          const contentType = req.headers["content-type"] ?? ""
          if (req.method !== "POST" || req.url !== "/v1/traces") {
            res.writeHead(404).end()
            return
          }
          const json = contentType.includes("application/json")
          posts.push({ path: req.url, contentType, headers: req.headers, raw: json ? body.toString("utf8") : body.toString("latin1") })
          spans.push(...(json ? fromJson(JSON.parse(body.toString("utf8"))) : fromProtobuf(body)))
          res.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" }).end(json ? "{}" : "")
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        resolve({
          endpoint: `http://127.0.0.1:${port}`,
          spans,
          posts,
          close: () => new Promise<void>((done) => server.close(() => done()))
        })
      })
    })
  ),
  (r) => Effect.promise(r.close)
)

// ---------------------------------------------------------------------------------------------
// Tracing as a process with these variables would have it

const withEnv = (env: Record<string, string>) => ConfigProvider.fromMap(new Map(Object.entries(env)))
const settingsOf = (env: Record<string, string>) => Effect.either(Effect.withConfigProvider(TracingConfig, withEnv(env)))
const tracingWith = (env: Record<string, string>) => TracingLive.pipe(Layer.provide(Layer.setConfigProvider(withEnv(env))))

/** The receiver's spans once `check` holds (the exporter sends every 50 ms here). */
const spansWhen = (receiver: Receiver, check: (spans: ReadonlyArray<Span>) => boolean) =>
  Effect.map(eventually(Effect.sync(() => receiver.spans), check, 200), (spans) => {
    expect(check(spans), `spans received: ${[...new Set(spans.map((s) => s.name))].join(", ")}`).toBe(true)
    return spans
  })

/** Whether `span` descends from a span matching `ancestor` (the same trace, through its parents). */
const descendsFrom = (spans: ReadonlyArray<Span>, span: Span, ancestor: (s: Span) => boolean) => {
  const byId = new Map(spans.map((s) => [s.spanId, s]))
  for (let p = byId.get(span.parentSpanId); p !== undefined; p = byId.get(p.parentSpanId)) {
    if (p.traceId !== span.traceId) return false
    if (ancestor(p)) return true
  }
  return false
}

const ENV = (receiver: Receiver, extra: Record<string, string> = {}) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: `${receiver.endpoint}/`,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  OTEL_EXPORTER_OTLP_HEADERS: "x-collector-key=s3cr%3Dt,x-other=1",
  OTEL_SERVICE_NAME: "agent-platform-test",
  OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=test,service.name=ignored,service.version=1.2%2B3",
  OTEL_BSP_SCHEDULE_DELAY: "50",
  ...extra
})

describe("tracing", () => {
  it.effect("off unless an OTLP endpoint is set; the OTEL_* variables", () =>
    Effect.gen(function*() {
      const off = (env: Record<string, string>) => Effect.map(settingsOf(env), (s) => expect(s).toEqual(Either.right(Option.none())))
      yield* off({})
      yield* off({ OTEL_SERVICE_NAME: "x", OTEL_EXPORTER_OTLP_HEADERS: "a=b", OTEL_EXPORTER_OTLP_ENDPOINT: " " })
      yield* off({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SDK_DISABLED: "TRUE" })
      yield* off({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_TRACES_EXPORTER: "none" })

      const on = (env: Record<string, string>) =>
        Effect.map(settingsOf(env), (s) => {
          expect(Either.isRight(s) && Option.isSome(s.right), String(s)).toBe(true)
          return Option.getOrThrow(Either.getOrThrow(s))
        })
      const base = yield* on({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/otlp/" })
      expect(base).toMatchObject({
        url: "http://collector:4318/otlp/v1/traces",
        protocol: "http/protobuf",
        serviceName: "agent-platform",
        attributes: {},
        maxBatchSize: 512
      })
      expect(Duration.toMillis(base.exportInterval)).toBe(5000)
      const full = yield* on({
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://ignored:4318",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://collector.example/custom/traces",
        OTEL_TRACES_EXPORTER: "otlp",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
        OTEL_EXPORTER_OTLP_HEADERS: "api-key=a%20b%2Cc, x-both=base",
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: "x-both=traces",
        OTEL_RESOURCE_ATTRIBUTES: "service.name=from-attributes,deployment.environment=prod%20eu",
        OTEL_BSP_SCHEDULE_DELAY: "250"
      })
      expect(full).toMatchObject({
        url: "https://collector.example/custom/traces",
        protocol: "http/json",
        serviceName: "from-attributes",
        attributes: { "service.name": "from-attributes", "deployment.environment": "prod eu" }
      })
      expect(Redacted.value(full.headers)).toEqual({ "api-key": "a b,c", "x-both": "traces" })
      expect(String(full.headers)).not.toContain("a b")
      expect(Duration.toMillis(full.exportInterval)).toBe(250)
      expect((yield* on({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SERVICE_NAME: "svc" })).serviceName).toBe("svc")

      // what cannot be honoured stops the start, naming the variable
      const refused = (env: Record<string, string>, variable: string) =>
        Effect.map(settingsOf({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", ...env }), (s) => {
          expect(Either.isLeft(s), String(s)).toBe(true)
          expect(String(Either.isLeft(s) ? s.left : "")).toContain(variable)
        })
      yield* refused({ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "OTEL_EXPORTER_OTLP_PROTOCOL")
      yield* refused({ OTEL_TRACES_EXPORTER: "zipkin" }, "OTEL_TRACES_EXPORTER")
      yield* refused({ OTEL_EXPORTER_OTLP_HEADERS: "novalue" }, "OTEL_EXPORTER_OTLP_HEADERS")
      yield* refused({ OTEL_EXPORTER_OTLP_HEADERS: "k=%E0%A4%A" }, "OTEL_EXPORTER_OTLP_HEADERS")
      yield* refused({ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" }, "OTEL_EXPORTER_OTLP_ENDPOINT")
      yield* refused({ OTEL_BSP_SCHEDULE_DELAY: "0" }, "OTEL_BSP_SCHEDULE_DELAY")

      // Off, the layer installs nothing: Effect's own tracer stays.
      const before = yield* Effect.tracer
      expect(yield* Effect.tracer.pipe(Effect.provide(tracingWith({})))).toBe(before)
    }))

  it.live("disabled, nothing reaches the collector", () =>
    Effect.gen(function*() {
      const receiver = yield* startReceiver
      yield* Effect.void.pipe(
        Effect.withSpan("probe"),
        Effect.zipRight(realSleep(200)),
        Effect.provide(tracingWith({ ...ENV(receiver), OTEL_SDK_DISABLED: "true" }))
      )
      yield* Effect.void.pipe(Effect.withSpan("probe"), Effect.provide(tracingWith({ ...ENV(receiver), OTEL_TRACES_EXPORTER: "none" })))
      yield* realSleep(100)
      expect(receiver.posts).toEqual([])
    }).pipe(Effect.scoped))

  it.live("by default OTLP/HTTP protobuf, with the resource and the collector's headers", () =>
    Effect.gen(function*() {
      const receiver = yield* startReceiver
      const env = ENV(receiver)
      delete (env as Record<string, string>).OTEL_EXPORTER_OTLP_PROTOCOL
      yield* Effect.gen(function*() {
        yield* Effect.void.pipe(Effect.withSpan("probe.child", { attributes: { n: 7 } }), Effect.withSpan("probe"))
        yield* spansWhen(receiver, (spans) => spans.length >= 2)
      }).pipe(Effect.provide(tracingWith(env)))
      expect(receiver.posts[0]).toMatchObject({ path: "/v1/traces", contentType: "application/x-protobuf" })
      expect(receiver.posts[0]!.headers).toMatchObject({ "x-collector-key": "s3cr=t", "x-other": "1" })
      const probe = receiver.spans.find((s) => s.name === "probe")!
      const child = receiver.spans.find((s) => s.name === "probe.child")!
      expect(child).toMatchObject({ traceId: probe.traceId, parentSpanId: probe.spanId, attributes: { n: 7 } })
      expect(probe.traceId).toMatch(/^[0-9a-f]{32}$/)
      expect(probe.resource).toMatchObject({ "service.name": "agent-platform-test", "deployment.environment": "test" })
    }).pipe(Effect.scoped))

  it.live("a failed model call: its type and status are traced, not the provider's answer (which echoed the key)", () =>
    Effect.gen(function*() {
      const receiver = yield* startReceiver
      const openai = cases.find((c) => c.name === "openai")!
      yield* withServer((server, engine) =>
        Effect.gen(function*() {
          server.enqueue({
            status: 401,
            headers: { [openai.idHeader]: "req_auth" },
            body: openai.error("authentication_error", `Incorrect API key provided: ${SECRET}`)
          })
          const error = yield* Effect.flip(engine.step(inputFor(openai, server, { runId: "run_test" })))
          expect(error._tag).toBe("ModelAuthFailed")
          const spans = yield* spansWhen(receiver, (all) => all.some((x) => x.name === "model.call"))
          const call = spans.find((x) => x.name === "model.call")!
          expect(call.attributes).toMatchObject({
            "model.provider": "openai",
            "run.id": "run_test",
            "model.outcome": "ModelAuthFailed",
            "model.provider_request_id": "req_auth"
          })
          const inner = spans.filter((x) => x.traceId === call.traceId && x !== call).map((x) => x.name)
          expect(inner).toEqual(expect.arrayContaining(["LanguageModel.generateText", "http.client POST"]))
          const raw = receiver.posts.map((p) => p.raw).join("\n")
          expect(raw).toContain("HttpResponseError") // the library's failure, by type
          expect(raw).toContain("HTTP 401")
          expect(raw).not.toContain(SECRET)
          expect(raw).not.toContain("Incorrect API key")
          expect(raw).not.toContain("Where is my order?") // the prompt
        })
      ).pipe(Effect.provide(tracingWith(ENV(receiver))))
    }).pipe(Effect.scoped))

  it.live("a request's span with its SQL beneath it; a scripted run's model call", () =>
    Effect.gen(function*() {
      const receiver = yield* startReceiver
      yield* Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "text", text: "You said: {{input}}" }])
        const conv = yield* s.conversation()
        const accepted = expectSingle(yield* s.startRun(conv.id, "hello"), 202)
        expect(isTerminal((yield* eventually(s.getRun(accepted.id), (r) => isTerminal(r.status))).status)).toBe(true)

        const isCreateRun = (span: Span) => span.name === "http.server POST createRun"
        // the actor's span ends (and is sent) last
        const isActor = (x: Span) => x.name === "RunActor.run" && x.attributes["run.id"] === accepted.id
        const spans = yield* spansWhen(receiver, (all) => all.some(isCreateRun) && all.some(isActor))
        const request = spans.find(isCreateRun)!
        expect(request.kind).toBe(2) // server
        expect(request.attributes).toMatchObject({
          operation: "createRun",
          "http.route": "/v1/tenants/:tenant_id/environments/:environment/conversations/:conversation_id/runs",
          "http.request.method": "POST",
          "http.response.status_code": 202,
          tenant_id: s.tenantId,
          "http.request.header.authorization": "<redacted>"
        })
        expect(request.attributes["request_id"]).toMatch(/^req_/)
        expect(request.resource).toMatchObject({
          "service.name": "agent-platform-test",
          "service.version": "1.2+3",
          "deployment.environment": "test"
        })
        // no raw id in any span's name
        for (const span of spans) expect(span.name).not.toMatch(/(ten|run|conv|key)_[0-9A-Za-z]/)

        // SQL made for the request is beneath it, in its trace
        const sql = spans.filter((x) => x.name === "sql.execute" && descendsFrom(spans, x, isCreateRun))
        expect(sql.length).toBeGreaterThan(0)
        expect(sql[0]!.traceId).toBe(request.traceId)
        expect(String(sql[0]!.attributes["db.query.text"])).not.toContain("hello")

        // the run: its actor, a child of the request that started it, and the model call within it
        const call = spans.find((x) => x.name === "model.call" && x.attributes["run.id"] === accepted.id)!
        expect(call.attributes).toMatchObject({
          "model.provider": "scripted",
          "model.name": "scripted-1",
          "model_profile.id": s.mp.id,
          "model.outcome": "final"
        })
        expect(descendsFrom(spans, call, isActor)).toBe(true)
        expect(descendsFrom(spans, call, isCreateRun)).toBe(true)
        expect(spans.some((x) => x.name === "LanguageModel.generateText" && x.parentSpanId === call.spanId)).toBe(true)

        // neither the key nor the input, anywhere
        for (const post of receiver.posts) {
          expect(post.raw).not.toContain(s.key)
          expect(post.raw).not.toContain("You said: hello")
        }
        expect(receiver.posts[0]!.headers).toMatchObject({ "x-collector-key": "s3cr=t" })
        expect(receiver.posts[0]!.raw.match(/"key":"service\.name"/g)).toHaveLength(1)
      }).pipe(Effect.provide(makeTestApp()), Effect.provide(tracingWith(ENV(receiver))))
    }).pipe(Effect.scoped), 30_000)

  it.live("a run's tool calls: a read, and a write approved with an actor token no span holds", () =>
    Effect.gen(function*() {
      const receiver = yield* startReceiver
      yield* Effect.gen(function*() {
        const s = yield* toolHostSandbox([
          { type: "tool_call", tool: "get_order", input: { order_id: "o-secret-order" } },
          { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
          { type: "text", text: "Refunded." }
        ])
        const run = yield* s.startRun
        const token = yield* s.actorToken
        const approval = yield* s.approvalOf(run.id)
        expectSingle(yield* s.call("POST", `/approvals/${approval.id}/decision`, { decision: "approve" }, { "x-actor-token": token }))
        expect((yield* s.waitFor(run.id, ["succeeded", "failed", "outcome_unknown"])).status).toBe("succeeded")

        const toolCalls = (all: ReadonlyArray<Span>) => all.filter((x) => x.name === "tool.call" && x.attributes["run.id"] === run.id)
        const isDecision = (x: Span) => x.name === "http.server POST decideApproval"
        const isActor = (x: Span) => x.name === "RunActor.run" && x.attributes["run.id"] === run.id
        const spans = yield* spansWhen(
          receiver,
          (all) => toolCalls(all).length === 2 && all.some(isDecision) && all.filter(isActor).length >= 2
        )
        const read = toolCalls(spans).find((x) => x.attributes["tool.effect"] === "read")
        const write = toolCalls(spans).find((x) => x.attributes["tool.effect"] === "write")
        const tool = (name: string) => s.tools.find((t) => t.name === name)
        expect(read!.attributes).toMatchObject({
          "tool.name": "get_order",
          "tool.id": tool("get_order").id,
          "tool.effect": "read",
          "connection.id": tool("get_order").connection_id,
          "tool.outcome": "ok",
          "http.response.status_code": 200
        })
        expect(write!.attributes).toMatchObject({ "tool.name": "create_refund", "tool.effect": "write", "tool.outcome": "ok" })
        expect(write!.attributes["operation.id"]).toBe(s.host.calls.find((c) => c.path === "/refunds")!.operationId)
        // a write runs from the approval's request: the actor it started is beneath it
        expect(descendsFrom(spans, write!, isDecision)).toBe(true)
        expect(descendsFrom(spans, write!, isActor)).toBe(true)

        const decision = spans.find(isDecision)!
        expect(decision.attributes).toMatchObject({ "http.request.header.x-actor-token": "<redacted>", operation: "decideApproval" })
        for (const post of receiver.posts) {
          expect(post.raw).not.toContain(token)
          expect(post.raw).not.toContain("o-secret-order") // tool input
          expect(post.raw).not.toContain(s.key)
        }
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings())), Effect.provide(tracingWith(ENV(receiver))))
    }).pipe(Effect.scoped), 30_000)
})
