/**
 * The platform's side of signed tool invocations, for tests: an Ed25519 key (jose), its key set
 * served on 127.0.0.1 by node:http, and tokens signed exactly as D10 says (header
 * `{alg:"EdDSA", kid, typ:"tool-invocation+jwt"}`, claims iss, aud, sub, iat, exp, jti, tenant_id,
 * environment, actor, operation_id, input_digest, cell_generation, run_id, tool_id). Every claim
 * and header field can be overridden or left out, to build the tokens a verifier must refuse.
 */
import { Effect, type Scope } from "effect"
import { base64url, type CryptoKey, exportJWK, generateKeyPair, type JWK, SignJWT } from "jose"
import { createHash, randomBytes } from "node:crypto"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"

export const TENANT = "ten_test"
export const ENVIRONMENT = "sandbox"
export const ISSUER = "https://platform.test"

export const digest = (body: string) => `sha-256=${createHash("sha256").update(body).digest("base64url")}`

export interface SignOptions {
  /** The exact URL called. */
  readonly audience: string
  /** The exact body bytes the digest is of ("" for GET). */
  readonly body: string
  readonly operationId?: string | undefined
  readonly cellGeneration?: number | undefined
  /** Seconds since the epoch; default now. */
  readonly iat?: number | undefined
  /** Default iat + 60. */
  readonly exp?: number | undefined
  /** Claims replacing (or, when `undefined`, removing) the defaults. */
  readonly claims?: Readonly<Record<string, unknown>> | undefined
  /** Header fields replacing the defaults. */
  readonly header?: Readonly<Record<string, unknown>> | undefined
  /** Sign with a key that is not published. */
  readonly unpublishedKey?: boolean | undefined
}

export interface Platform {
  readonly jwksUrl: string
  /** What the key set server served so far (how many fetches). */
  readonly jwksFetches: () => number
  readonly kid: string
  readonly sign: (options: SignOptions) => Promise<string>
  /** The claims `sign` would use (before overrides), for tokens built by hand. */
  readonly claimsFor: (options: SignOptions) => Record<string, unknown>
}

const newKey = async () => {
  const { privateKey, publicKey } = await generateKeyPair("EdDSA", { crv: "Ed25519" })
  const kid = `sk_${randomBytes(6).toString("hex")}`
  const jwk: JWK = { ...(await exportJWK(publicKey)), kid, alg: "EdDSA", use: "sig" }
  return { privateKey: privateKey as CryptoKey, kid, jwk }
}

/** A signing platform with its key set on 127.0.0.1:<random port> for the scope. */
export const makePlatform: Effect.Effect<Platform, never, Scope.Scope> = Effect.gen(function*() {
  const published = yield* Effect.promise(newKey)
  const unpublished = yield* Effect.promise(newKey)
  let fetches = 0
  const server = createServer((req, res) => {
    if (req.method === "GET" && req.url === `/v1/tenants/${TENANT}/environments/${ENVIRONMENT}/jwks.json`) {
      fetches++
      res.writeHead(200, { "content-type": "application/json" })
      return res.end(JSON.stringify({ keys: [published.jwk] }))
    }
    res.writeHead(404).end()
  })
  yield* Effect.acquireRelease(
    Effect.async<void>((resume) => void server.listen(0, "127.0.0.1", () => resume(Effect.void))),
    () => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  )
  const port = (server.address() as AddressInfo).port

  const claimsFor = (o: SignOptions) => {
    const iat = o.iat ?? Math.floor(Date.now() / 1000)
    const base: Record<string, unknown> = {
      iss: ISSUER,
      aud: o.audience,
      sub: "usr_1",
      iat,
      exp: o.exp ?? iat + 60,
      jti: randomBytes(12).toString("base64url"),
      tenant_id: TENANT,
      environment: ENVIRONMENT,
      actor: { type: "user", id: "usr_1" },
      ...(o.operationId !== undefined ? { operation_id: o.operationId } : {}),
      input_digest: digest(o.body),
      cell_generation: o.cellGeneration ?? 1,
      run_id: "run_1",
      tool_id: "tool_1"
    }
    for (const [key, value] of Object.entries(o.claims ?? {})) {
      if (value === undefined) delete base[key]
      else base[key] = value
    }
    return base
  }

  const sign = (o: SignOptions) => {
    const key = o.unpublishedKey ? unpublished : published
    return new SignJWT(claimsFor(o))
      .setProtectedHeader({ alg: "EdDSA", kid: published.kid, typ: "tool-invocation+jwt", ...o.header })
      .sign(key.privateKey)
  }

  return {
    jwksUrl: `http://127.0.0.1:${port}/v1/tenants/${TENANT}/environments/${ENVIRONMENT}/jwks.json`,
    jwksFetches: () => fetches,
    kid: published.kid,
    sign,
    claimsFor
  }
})

/** An unsigned token (`alg: none`) with the given claims. */
export const unsecuredToken = (claims: Record<string, unknown>) =>
  `${base64url.encode(JSON.stringify({ alg: "none", typ: "tool-invocation+jwt" }))}.${base64url.encode(JSON.stringify(claims))}.`

/** An HS256 token with the given claims and secret. */
export const hs256Token = (claims: Record<string, unknown>, secret: Uint8Array, kid: string) =>
  new SignJWT(claims).setProtectedHeader({ alg: "HS256", kid, typ: "tool-invocation+jwt" }).sign(secret)

export type Reply =
  | { readonly _tag: "Reply"; readonly status: number; readonly body: any; readonly text: string }
  | { readonly _tag: "Failed"; readonly reason: "timeout" | "network"; readonly error: unknown }

/** One HTTP call as the platform makes it: `Authorization: Bearer`, `X-Operation-Id`, the exact body. */
export const call = (
  method: "GET" | "POST",
  url: string,
  options: { readonly token?: string; readonly body?: string; readonly operationId?: string; readonly timeoutMs?: number }
) =>
  Effect.promise(async (): Promise<Reply> => {
    const headers: Record<string, string> = {}
    if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
    if (options.operationId !== undefined) headers["x-operation-id"] = options.operationId
    if (options.body !== undefined) headers["content-type"] = "application/json"
    try {
      const res = await fetch(url, {
        method,
        headers,
        ...(options.body !== undefined ? { body: options.body } : {}),
        signal: AbortSignal.timeout(options.timeoutMs ?? 10_000)
      })
      const text = await res.text()
      let body: unknown
      try {
        body = text === "" ? undefined : JSON.parse(text)
      } catch {
        body = undefined
      }
      return { _tag: "Reply", status: res.status, body, text }
    } catch (error) {
      const timeout = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError")
      return { _tag: "Failed", reason: timeout ? "timeout" : "network", error }
    }
  })
