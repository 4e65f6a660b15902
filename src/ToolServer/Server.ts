/**
 * A tool server from a list of operations: routes `POST {path}` to its operation and
 * `GET {reconciliationPath}` to the write's reconciliation, verifies the invocation against the raw
 * body, parses and validates the JSON input, runs reads directly and writes through `runWrite`,
 * and answers JSON (`{error:{code,message}}` on failure).
 *
 * `makeToolServer` is framework-free (`ToolRequest -> ToolResponse`); `nodeListener` serves it
 * with node:http.
 */
import type { IncomingMessage, ServerResponse } from "node:http"

import type { SqlClient } from "@effect/sql"
import { Cause, Effect, FiberSet, ParseResult, Schema, type Scope } from "effect"

import type { InvocationRejected, VerifiedInvocation, Verifier } from "./Verify.js"
import { type OperationConflict, reconcile, runWrite, type ToolFailure } from "./WriteLedger.js"

/** One operation of the server, its input/output types erased (see `defineOperation`). */
export interface ToolOperation<R> {
  readonly name: string
  readonly effect: "read" | "write"
  readonly path: string
  /** Writes: e.g. `/refunds/operations/{operation_id}`. */
  readonly reconciliationPath?: string
  /** The exact `aud` expected; default the server's `publicBaseUrl` + `path`. */
  readonly audience?: string
  /** Decodes the input; the result runs the handler and returns the encoded (JSON) output. */
  readonly prepare: (
    input: unknown
  ) => Effect.Effect<(invocation: VerifiedInvocation) => Effect.Effect<unknown, ToolFailure, R>, InvalidInput>
}

export interface OperationDefinition<I, IE, O, OE, R> {
  readonly name: string
  readonly effect: "read" | "write"
  readonly path: string
  readonly reconciliationPath?: string
  readonly audience?: string
  readonly input: Schema.Schema<I, IE>
  readonly output: Schema.Schema<O, OE>
  /**
   * The business logic, given the verified caller (authorize it here). A write's handler runs
   * inside the operation's transaction: use the `SqlClient` from the context.
   */
  readonly handler: (input: I, invocation: VerifiedInvocation) => Effect.Effect<O, ToolFailure, R>
}

/** The input did not match the operation's schema (400 `invalid_input`). */
export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", { message: Schema.String }) {}
/** The body is not JSON (400 `invalid_json`). */
export class InvalidJson extends Schema.TaggedError<InvalidJson>()("InvalidJson", { message: Schema.String }) {}

/** An operation from its schemas and handler. */
export const defineOperation = <I, IE, O, OE, R>(definition: OperationDefinition<I, IE, O, OE, R>): ToolOperation<R> => {
  const decode = Schema.decodeUnknown(definition.input)
  const encode = Schema.encode(definition.output)
  return {
    name: definition.name,
    effect: definition.effect,
    path: definition.path,
    ...(definition.reconciliationPath !== undefined ? { reconciliationPath: definition.reconciliationPath } : {}),
    ...(definition.audience !== undefined ? { audience: definition.audience } : {}),
    prepare: (input) =>
      decode(input).pipe(
        Effect.mapError((e) => new InvalidInput({ message: ParseResult.TreeFormatter.formatErrorSync(e) })),
        Effect.map((decoded) => (invocation: VerifiedInvocation) =>
          Effect.flatMap(definition.handler(decoded, invocation), (output) => Effect.orDie(encode(output)))
        )
      )
  }
}

export interface ToolRequest {
  readonly method: string
  /** The request target: path, optionally with a query string (ignored). */
  readonly path: string
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  readonly rawBody: Uint8Array
}

export interface ToolResponse {
  readonly status: number
  readonly body: unknown
}

export interface ToolServerConfig<R> {
  readonly verifier: Verifier
  /** The public base URL the platform calls (e.g. `https://tools.acme.com`): audiences derive from it. */
  readonly publicBaseUrl: string
  readonly operations: ReadonlyArray<ToolOperation<R>>
}

export interface ToolServer<R> {
  readonly handle: (request: ToolRequest) => Effect.Effect<ToolResponse, never, R | SqlClient.SqlClient>
}

const error = (status: number, code: string, message: string): ToolResponse => ({ status, body: { error: { code, message } } })

const PLACEHOLDER = "{operation_id}"

/** The operation id when `pathname` matches the reconciliation template. */
const matchReconciliation = (template: string, pathname: string): string | undefined => {
  const at = template.indexOf(PLACEHOLDER)
  if (at < 0) return undefined
  const prefix = template.slice(0, at)
  const suffix = template.slice(at + PLACEHOLDER.length)
  if (!pathname.startsWith(prefix) || !pathname.endsWith(suffix) || pathname.length <= prefix.length + suffix.length) {
    return undefined
  }
  const segment = pathname.slice(prefix.length, pathname.length - suffix.length)
  if (segment.includes("/")) return undefined
  try {
    return decodeURIComponent(segment)
  } catch {
    return undefined
  }
}

const parseJson = (raw: Uint8Array) =>
  Effect.try({
    try: () => JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw)) as unknown,
    catch: () => new InvalidJson({ message: "the body must be JSON (UTF-8)" })
  })

const fromFailure = (
  e: InvocationRejected | ToolFailure | OperationConflict | InvalidInput | InvalidJson
): ToolResponse => {
  switch (e._tag) {
    case "InvocationRejected":
      return error(e.status, e.code, e.message)
    case "ToolFailure":
      return error(e.status, e.code, e.message)
    case "OperationConflict":
      return error(409, "operation_conflict", e.message)
    case "InvalidInput":
      return error(400, "invalid_input", e.message)
    case "InvalidJson":
      return error(400, "invalid_json", e.message)
  }
}

/** The request handler for `config.operations`. */
export const makeToolServer = <R>(config: ToolServerConfig<R>): ToolServer<R> => {
  const base = config.publicBaseUrl.replace(/\/+$/, "")
  const { verifier } = config

  const invoke = (op: ToolOperation<R>, request: ToolRequest) =>
    Effect.gen(function*() {
      if (request.method !== "POST") return error(405, "method_not_allowed", "tools are invoked with POST")
      const invocation = yield* verifier.verifyInvocation({
        method: request.method,
        audience: op.audience ?? `${base}${op.path}`,
        headers: request.headers,
        rawBody: request.rawBody,
        requireOperationId: op.effect === "write"
      })
      const run = yield* Effect.flatMap(parseJson(request.rawBody), op.prepare)
      const output = op.effect === "write"
        ? yield* runWrite(invocation.operationId!, op.name, run(invocation))
        : yield* run(invocation)
      return { status: 200, body: output } satisfies ToolResponse
    }).pipe(
      Effect.catchAll((e) => Effect.succeed(fromFailure(e))),
      Effect.withSpan("ToolServer.invoke", { attributes: { operation: op.name } })
    )

  const reconciliation = (op: ToolOperation<R>, operationId: string, pathname: string, request: ToolRequest) =>
    Effect.gen(function*() {
      if (request.method !== "GET") return error(405, "method_not_allowed", "reconciliation is a GET")
      yield* verifier.verifyInvocation({
        method: request.method,
        audience: `${base}${pathname}`,
        headers: request.headers,
        rawBody: request.rawBody,
        expectedOperationId: operationId
      })
      const answer = yield* reconcile(operationId)
      return { status: 200, body: answer } satisfies ToolResponse
    }).pipe(
      Effect.catchAll((e) => Effect.succeed(fromFailure(e))),
      Effect.withSpan("ToolServer.reconcile", { attributes: { operation: op.name } })
    )

  const handle = (request: ToolRequest) => {
    const pathname = request.path.split("?")[0]!
    const op = config.operations.find((o) => o.path === pathname)
    if (op) return invoke(op, request)
    for (const candidate of config.operations) {
      if (candidate.effect !== "write" || candidate.reconciliationPath === undefined) continue
      const operationId = matchReconciliation(candidate.reconciliationPath, pathname)
      if (operationId !== undefined) return reconciliation(candidate, operationId, pathname, request)
    }
    return Effect.succeed(error(404, "not_found", "no operation at this path"))
  }

  return {
    handle: (request) =>
      handle(request).pipe(
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause)
            : Effect.as(
              Effect.logError("tool server: unexpected failure", cause),
              error(500, "internal_error", "the tool server failed; the outcome of a write can be reconciled")
            )
        )
      )
  }
}

// ---- node:http -----------------------------------------------------------------------------

/** Reads the whole body; `undefined` when it exceeds `maxBytes`. */
export const readRawBody = (req: IncomingMessage, maxBytes: number): Promise<Uint8Array | undefined> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    req.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > maxBytes) {
        resolve(undefined)
        req.removeAllListeners("data")
        req.resume()
        return
      }
      chunks.push(chunk)
    })
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

/** Writes a `ToolResponse` as JSON. */
export const sendResponse = (res: ServerResponse, response: ToolResponse) => {
  const body = JSON.stringify(response.body ?? null)
  res.writeHead(response.status, {
    "content-type": "application/json",
    "cache-control": "no-store",
    "content-length": Buffer.byteLength(body)
  })
  res.end(body)
}

/** The `ToolRequest` of a node request and its body. */
export const toToolRequest = (req: IncomingMessage, rawBody: Uint8Array): ToolRequest => ({
  method: req.method ?? "GET",
  path: req.url ?? "/",
  headers: req.headers,
  rawBody
})

/**
 * A node:http listener for `server`, running requests in the current scope's runtime (requests
 * still running when the scope closes are interrupted). Bodies over `maxBodyBytes` (default 1 MiB)
 * get 413.
 */
export const nodeListener = <R>(
  server: ToolServer<R>,
  options: { readonly maxBodyBytes?: number } = {}
): Effect.Effect<(req: IncomingMessage, res: ServerResponse) => void, never, Scope.Scope | R | SqlClient.SqlClient> =>
  Effect.map(FiberSet.makeRuntime<R | SqlClient.SqlClient>(), (run) => (req, res) => {
    readRawBody(req, options.maxBodyBytes ?? 1024 * 1024).then(
      (raw) => {
        if (raw === undefined) return sendResponse(res, error(413, "body_too_large", "the body is too large"))
        run(server.handle(toToolRequest(req, raw))).addObserver((exit) => {
          if (exit._tag === "Success" && !res.headersSent) sendResponse(res, exit.value)
        })
      },
      () => res.destroy()
    )
  })
