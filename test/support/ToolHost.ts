/**
 * A customer tool server for end-to-end tests: real HTTP on 127.0.0.1, verifying every invocation
 * with jose (`createRemoteJWKSet` on the platform's `jwks.json` + `jwtVerify`: issuer, exact
 * audience, expiry, typ, input digest of the raw body), an "orders" read and a "refunds" write
 * that keeps the write contract (one outcome per operation id), and a reconciliation endpoint.
 * Knobs make a write ambiguous (answer 500 after committing, or never answer) and the
 * reconciliation answer unknown.
 */
import { Effect } from "effect"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { createHash } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export interface ToolHost {
  readonly baseUrl: string
  readonly calls: Array<
    { path: string; claims: Record<string, any>; kid: string | undefined; token: string; body: string; operationId: string | undefined }
  >
  readonly rejected: Array<{ path: string; reason: string }>
  /** operation id -> refund */
  readonly refunds: Map<string, { refund_id: string; order_id: string; amount: number }>
  knobs: {
    /**
     * after committing a write: "ok" answers, "slow" answers after 1.5 s, "500" answers 500, "hang"
     * never answers; "rolled_back" answers 500 and the write is not kept (its commit failed);
     * "late" commits it 3 s after it arrived, and answers then (a write still in flight after the
     * platform gave up on its answer, or a stalled sender's delivery)
     */
    afterWrite: "ok" | "slow" | "500" | "hang" | "rolled_back" | "late"
    /** the reconciliation endpoint: "truth" answers from the store, "500" fails */
    reconciliation: "truth" | "500"
  }
}

const digest = (body: string) => `sha-256=${createHash("sha256").update(body).digest("base64url")}`

const read = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
  })

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

/** Starts the server (closed with the scope); `jwksUrl` and `issuer` are the platform's. */
export const startToolHost = (options: { jwksUrl: () => string; issuer: string; tenantId: () => string }) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      let host!: ToolHost
      const hanging = new Set<ServerResponse>()
      const server = createServer(async (req, res) => {
        const body = await read(req)
        const path = req.url ?? "/"
        const url = `${host.baseUrl}${path}`
        const token = (req.headers.authorization ?? "").replace(/^Bearer /, "")
        let claims: Record<string, any>
        let kid: string | undefined
        try {
          const verified = await jwtVerify(token, createRemoteJWKSet(new URL(options.jwksUrl())), {
            issuer: options.issuer,
            audience: url,
            typ: "tool-invocation+jwt",
            algorithms: ["EdDSA"]
          })
          claims = verified.payload as Record<string, any>
          kid = verified.protectedHeader.kid
          if (claims.input_digest !== digest(body)) throw new Error("input digest mismatch")
          if (claims.tenant_id !== options.tenantId()) throw new Error("wrong tenant")
          if (claims.exp - claims.iat > 60) throw new Error("token lives too long")
          if (req.headers["x-operation-id"] !== claims.operation_id) throw new Error("operation id mismatch")
        } catch (e) {
          host.rejected.push({ path, reason: e instanceof Error ? e.message : String(e) })
          return json(res, 401, { error: { code: "invalid_token" } })
        }
        const operationId = req.headers["x-operation-id"] as string | undefined
        host.calls.push({ path, claims, kid, token, body, operationId })
        if (req.method === "POST" && path === "/orders/get") {
          const input = JSON.parse(body)
          // "o-broken" answers without the `status` its output schema requires
          if (input.order_id === "o-broken") return json(res, 200, { order_id: input.order_id })
          return json(res, 200, { order_id: input.order_id, status: "shipped", amount: 42 })
        }
        if (req.method === "POST" && path === "/refunds") {
          const input = JSON.parse(body)
          if (host.knobs.afterWrite === "late" && !host.refunds.has(operationId!)) {
            return void setTimeout(() => {
              const late = { refund_id: `rf_${host.refunds.size + 1}`, order_id: input.order_id, amount: input.amount }
              host.refunds.set(operationId!, late)
              if (!res.destroyed) json(res, 200, late)
            }, 3000)
          }
          let refund = host.refunds.get(operationId!)
          if (refund === undefined) {
            refund = { refund_id: `rf_${host.refunds.size + 1}`, order_id: input.order_id, amount: input.amount }
            host.refunds.set(operationId!, refund) // "committed"
          }
          if (host.knobs.afterWrite === "500") return json(res, 500, { error: "boom" })
          if (host.knobs.afterWrite === "rolled_back") {
            host.refunds.delete(operationId!)
            return json(res, 500, { error: "commit failed" })
          }
          if (host.knobs.afterWrite === "hang") return void hanging.add(res)
          if (host.knobs.afterWrite === "slow") return void setTimeout(() => json(res, 200, refund), 1500)
          return json(res, 200, refund)
        }
        const m = /^\/refunds\/operations\/([^/]+)$/.exec(path)
        if (req.method === "GET" && m) {
          if (host.knobs.reconciliation === "500") return json(res, 500, { error: "down" })
          const id = decodeURIComponent(m[1]!)
          const refund = host.refunds.get(id)
          return json(
            res,
            200,
            refund ? { operation_id: id, status: "succeeded", output: refund } : { operation_id: id, status: "not_found" }
          )
        }
        return json(res, 404, { error: "no such operation" })
      })
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const port = (server.address() as AddressInfo).port
      host = {
        baseUrl: `http://127.0.0.1:${port}`,
        calls: [],
        rejected: [],
        refunds: new Map(),
        knobs: { afterWrite: "ok", reconciliation: "truth" }
      }
      return { host, server, hanging }
    }),
    ({ hanging, server }) =>
      Effect.promise(() => {
        for (const res of hanging) res.destroy()
        server.closeAllConnections()
        return new Promise<void>((resolve) => server.close(() => resolve()))
      })
  ).pipe(Effect.map(({ host }) => host))

/** The connection registration body for this host (or another orders server, with its paths). */
export const connectionBody = (
  baseUrl: string,
  paths: { readonly read: string; readonly write: string; readonly reconciliation: string } = {
    read: "/orders/get",
    write: "/refunds",
    reconciliation: "/refunds/operations/{operation_id}"
  }
) => ({
  name: "Orders",
  type: "customer_https",
  owner: { type: "tenant" },
  base_url: baseUrl,
  authentication: { type: "service_signed_request" },
  operations: [
    {
      name: "get_order",
      effect: "read",
      path: paths.read,
      input_schema: { type: "object", properties: { order_id: { type: "string" } }, required: ["order_id"], additionalProperties: false },
      output_schema: {
        type: "object",
        properties: { order_id: { type: "string" }, status: { type: "string" }, amount: { type: "number" } },
        required: ["order_id", "status"]
      }
    },
    {
      name: "create_refund",
      effect: "write",
      path: paths.write,
      reconciliation_path: paths.reconciliation,
      input_schema: {
        type: "object",
        properties: { order_id: { type: "string" }, amount: { type: "number" } },
        required: ["order_id", "amount"]
      },
      output_schema: { type: "object", properties: { refund_id: { type: "string" } }, required: ["refund_id"] }
    }
  ]
})
