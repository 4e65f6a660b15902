/**
 * Signed HTTP calls to customer tools (D10, contract 4.1): `POST {base_url}{path}` with the exact
 * input bytes, `Authorization: Bearer <invocation JWT>` and `X-Operation-Id`; reconciliation is a
 * signed `GET {base_url}{reconciliation_path}`. Calls go through the destination guard (checked on
 * the address the socket uses), never follow redirects, and are aborted after
 * TOOL_REQUEST_TIMEOUT_SECONDS (the request's own timer: it must also end a write made
 * uninterruptibly).
 *
 * What a call can end as matters for writes, which are never retried:
 *   - `Ok`: a 2xx with a JSON body;
 *   - `Rejected`: the tool answered and refused (a 4xx, or a redirect): nothing to reconcile;
 *   - `NotSent`: the request never reached the tool (refused destination, DNS, connection refused);
 *   - `Ambiguous`: it may have been applied (timeout after sending, connection reset, 5xx):
 *     only the reconciliation path may tell.
 */
import { Data, Effect } from "effect"
import { request } from "undici"

import { AppConfig } from "../Config/AppConfig.js"
import type { CellRef } from "../Kernel/Principal.js"
import { sharedBy, Shares } from "../Kernel/Shares.js"
import { traced } from "../Kernel/Spans.js"
import { Destinations } from "../Outbound/Destinations.js"
import { inputDigest, SigningKeys } from "./Signing.js"

export type CallOutcome = Data.TaggedEnum<{
  Ok: { readonly status: number; readonly body: unknown }
  Rejected: { readonly status: number; readonly message: string; readonly body: unknown }
  NotSent: { readonly message: string }
  /** `answered`: the tool answered (a 5xx, a 2xx without JSON): that delivery is over, whatever its outcome */
  Ambiguous: { readonly message: string; readonly answered: boolean }
}>
export const CallOutcome = Data.taggedEnum<CallOutcome>()

export interface CallContext {
  readonly cell: CellRef
  readonly actor: { readonly type: string; readonly id: string }
  readonly operationId: string
  readonly cellGeneration: number
  readonly runId: string
  readonly toolId: string
  /** the token's `iat` when not now (a write's: its operation's commit, see InvocationClaims) */
  readonly issuedAt?: Date
}

/** Errors raised before any byte was sent. */
const NOT_SENT_CODES = new Set([
  "DESTINATION_REFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ECONNREFUSED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "CERT_HAS_EXPIRED",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE"
])

const MAX_RESPONSE_BYTES = 1024 * 1024

export class Invoker extends Effect.Service<Invoker>()("Invoker", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const signing = yield* SigningKeys
    const destinations = yield* Destinations
    // (issue 36) a call waits for its cell's share of the node's calls out, not behind other cells' calls
    const callOut = sharedBy(yield* Shares, "outbound")
    const timeoutMs = config.tools.requestTimeoutSeconds * 1000

    const call = (method: "POST" | "GET", url: string, body: string, ctx: CallContext) =>
      Effect.gen(function*() {
        const token = yield* signing.sign(ctx.cell, {
          audience: url,
          actor: ctx.actor,
          operationId: ctx.operationId,
          inputDigest: inputDigest(body),
          cellGeneration: ctx.cellGeneration,
          runId: ctx.runId,
          toolId: ctx.toolId,
          ...(ctx.issuedAt === undefined ? {} : { issuedAt: ctx.issuedAt })
        })
        const headers: Record<string, string> = {
          authorization: `Bearer ${token}`,
          "x-operation-id": ctx.operationId,
          accept: "application/json",
          "user-agent": "agent-platform-tools/1"
        }
        if (method === "POST") headers["content-type"] = "application/json"
        const attempt = Effect.tryPromise({
          try: async (signal): Promise<CallOutcome> => {
            const res = await request(url, {
              method,
              headers,
              ...(method === "POST" ? { body } : {}),
              dispatcher: destinations.dispatcher,
              // The timeout is the request's own (it must also end a call made uninterruptibly).
              signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
            })
            const text = await readLimited(res.body)
            let parsed: unknown = undefined
            try {
              parsed = text === "" ? undefined : JSON.parse(text)
            } catch {
              parsed = undefined
            }
            if (res.statusCode >= 200 && res.statusCode < 300) {
              return parsed === undefined
                ? CallOutcome.Ambiguous({ message: `the tool answered ${res.statusCode} without a JSON body`, answered: true })
                : CallOutcome.Ok({ status: res.statusCode, body: parsed })
            }
            if (res.statusCode >= 300 && res.statusCode < 400) {
              return CallOutcome.Rejected({
                status: res.statusCode,
                message: `the tool answered a redirect (${res.statusCode}); redirects are not followed`,
                body: undefined
              })
            }
            if (res.statusCode >= 400 && res.statusCode < 500 && res.statusCode !== 408) {
              return CallOutcome.Rejected({
                status: res.statusCode,
                message: `the tool refused the call (${res.statusCode})`,
                body: parsed
              })
            }
            return CallOutcome.Ambiguous({ message: `the tool answered ${res.statusCode}`, answered: true })
          },
          catch: (e) => e
        }).pipe(
          Effect.catchAll((e: any) => {
            if (e?.name === "TimeoutError" || e?.cause?.name === "TimeoutError") {
              return Effect.succeed(
                CallOutcome.Ambiguous({ message: `no answer within ${config.tools.requestTimeoutSeconds} s`, answered: false })
              )
            }
            const code = e?.code ?? e?.cause?.code
            const message = `${code ?? "error"}: ${e?.message ?? String(e)}`
            return Effect.succeed(
              NOT_SENT_CODES.has(code) ? CallOutcome.NotSent({ message }) : CallOutcome.Ambiguous({ message, answered: false })
            )
          })
        )
        return yield* callOut(attempt)
      }).pipe(traced("Invoker.call", { attributes: { method, url, tool_id: ctx.toolId } }))

    return {
      /** The invocation: the exact bytes of `body` are sent and digested. */
      invoke: (url: string, body: string, ctx: CallContext) => call("POST", url, body, ctx),
      /** The reconciliation call of a write (its digest is of the empty body). */
      reconcile: (url: string, ctx: CallContext) => call("GET", url, "", ctx)
    } as const
  }),
  dependencies: [SigningKeys.Default, Destinations.Default]
}) {}

const readLimited = async (body: AsyncIterable<Uint8Array> & { destroy?: () => void }): Promise<string> => {
  const chunks: Array<Uint8Array> = []
  let size = 0
  for await (const chunk of body) {
    size += chunk.length
    if (size > MAX_RESPONSE_BYTES) {
      body.destroy?.()
      throw Object.assign(new Error("the tool's answer is larger than 1 MiB"), { code: "RESPONSE_TOO_LARGE" })
    }
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString("utf8")
}
