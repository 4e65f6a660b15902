/**
 * Signed tool invocations (D10, contract 5 rule 6): each cell (tenant/environment) has its own
 * Ed25519 key; the private half is encrypted at rest with `Secrets` (bound to the key id), the
 * public half is published at `GET P/jwks.json`. A cell's first key is made on first use; rotation
 * (operator, D17) retires the active key but keeps it published until every token it signed has
 * expired (token life + a minute of clock skew).
 *
 * Tokens: header `{alg:"EdDSA", kid, typ:"tool-invocation+jwt"}`; claims exactly as D10 (`iss`,
 * `aud` = the exact URL called, `sub`, `iat`, `exp` <= 60 s later, `jti`, `tenant_id`,
 * `environment`, `actor`, `operation_id`, `input_digest`, `cell_generation`, `run_id`, `tool_id`).
 */
import { createHash, randomBytes } from "node:crypto"

import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option, Redacted } from "effect"
import { type CryptoKey, exportJWK, generateKeyPair, importJWK, type JWK, SignJWT } from "jose"

import { AppConfig } from "../Config/AppConfig.js"
import { Secrets } from "../Crypto/Secrets.js"
import { dieOnSqlError } from "../Database/Defects.js"
import type { CellRef } from "../Kernel/Principal.js"
import { afterCommit } from "../Kernel/UnitOfWork.js"
import { PlatformRepo } from "../Platform.js"
import { SigningRepo } from "./SigningRepo.js"

/** Seconds a retired key stays published beyond the life of the last token it signed. */
const CLOCK_SKEW_SECONDS = 60
/** How long a process signs with the active key it last read (well under CLOCK_SKEW_SECONDS). */
const ACTIVE_CACHE_MS = 30_000

/** `sha-256=` + base64url of the SHA-256 of the exact body bytes (D10 `input_digest`). */
export const inputDigest = (body: Uint8Array | string): string => `sha-256=${createHash("sha256").update(body).digest("base64url")}`

export interface InvocationClaims {
  readonly audience: string
  readonly actor: { readonly type: string; readonly id: string }
  readonly operationId: string
  readonly inputDigest: string
  readonly cellGeneration: number
  readonly runId: string
  readonly toolId: string
  /**
   * `iat` when the token's life must not start at signing: a write's is the commit of its operation
   * (`tool_operations.created_at`), so a process that stalls after that commit (a GC pause, SIGSTOP)
   * and sends the write later cannot sign a fresh token for it; once that token expired, no
   * delivery of the write can be accepted, and a reconciler may take `not_found` as final.
   */
  readonly issuedAt?: Date
}

export class SigningKeys extends Effect.Service<SigningKeys>()("SigningKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* SigningRepo
    const secrets = yield* Secrets
    const platform = yield* PlatformRepo
    const config = yield* AppConfig
    const issuer = Option.getOrElse(
      Option.orElse(config.tools.issuer, () => config.publicBaseUrl),
      () => `http://${config.host}:${config.port}`
    )
    /** Imported private keys by kid: a key never changes once made. */
    const imported = new Map<string, CryptoKey>()
    /**
     * Each cell's active key, remembered for ACTIVE_CACHE_MS so a tool call does not read it from
     * Postgres every time. Safe across processes: a key retired elsewhere stays published for the
     * token life + a minute, longer than a remembered key can still be used to sign.
     */
    const remembered = new Map<string, { kid: string; key: CryptoKey; until: number }>()

    const newKey = (cell: CellRef, at: Date) =>
      Effect.gen(function*() {
        const { privateKey, publicKey } = yield* Effect.promise(() => generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true }))
        const kid = `sk_${randomBytes(12).toString("base64url")}`
        const publicJwk = { ...(yield* Effect.promise(() => exportJWK(publicKey))), kid, alg: "EdDSA", use: "sig" }
        const privateJwk = yield* Effect.promise(() => exportJWK(privateKey))
        const sealed = yield* secrets.encrypt(JSON.stringify(privateJwk), kid)
        yield* repo.insert({ kid, cell, publicJwk, sealed, at })
      })

    const activeRow = repo.active

    /** The cell's active key, made on first use (a racing maker loses on the unique index). */
    const active = (cell: CellRef) =>
      Effect.gen(function*() {
        const cacheKey = `${cell.tenantId}/${cell.environment}`
        const at = yield* Clock.currentTimeMillis
        const known = remembered.get(cacheKey)
        if (known !== undefined && known.until > at) return known
        let row = yield* activeRow(cell)
        if (row === undefined) {
          yield* newKey(cell, new Date(yield* Clock.currentTimeMillis))
          row = yield* activeRow(cell)
        }
        if (row === undefined) return yield* Effect.dieMessage("no active signing key after creating one")
        let key = imported.get(row.kid)
        if (key === undefined) {
          const plain = yield* Effect.orDie(secrets.decrypt({
            ciphertext: row.private_ciphertext,
            iv: row.private_iv,
            tag: row.private_tag
          }, row.kid))
          const jwk = JSON.parse(Redacted.value(plain)) as JWK
          key = (yield* Effect.promise(() => importJWK(jwk, "EdDSA"))) as CryptoKey
          imported.set(row.kid, key)
        }
        const current = { kid: row.kid, key, until: at + ACTIVE_CACHE_MS }
        remembered.set(cacheKey, current)
        return current
      })

    /** A signed invocation token for one call. */
    const sign = (cell: CellRef, claims: InvocationClaims) =>
      Effect.gen(function*() {
        const { key, kid } = yield* active(cell)
        const now = Math.floor((claims.issuedAt?.getTime() ?? (yield* Clock.currentTimeMillis)) / 1000)
        return yield* Effect.promise(() =>
          new SignJWT({
            tenant_id: cell.tenantId,
            environment: cell.environment,
            actor: { type: claims.actor.type, id: claims.actor.id },
            operation_id: claims.operationId,
            input_digest: claims.inputDigest,
            cell_generation: claims.cellGeneration,
            run_id: claims.runId,
            tool_id: claims.toolId
          })
            .setProtectedHeader({ alg: "EdDSA", kid, typ: "tool-invocation+jwt" })
            .setIssuer(issuer)
            .setAudience(claims.audience)
            .setSubject(claims.actor.id)
            .setIssuedAt(now)
            .setExpirationTime(now + config.tools.tokenSeconds)
            .setJti(randomBytes(16).toString("base64url"))
            .sign(key)
        )
      })

    /** The published key set: the active key and retired keys still within their overlap. */
    const jwks = (cell: CellRef) =>
      Effect.gen(function*() {
        yield* active(cell) // a cell publishes its key before it first signs
        const now = new Date(yield* Clock.currentTimeMillis)
        return { keys: yield* repo.published(cell, now) }
      })

    /** Retires the active key (published until its tokens expired) and makes a new one. */
    const rotate = (cell: CellRef) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const publishUntil = new Date(now + (config.tools.tokenSeconds + CLOCK_SKEW_SECONDS) * 1000)
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* repo.retireActive(cell, new Date(now), publishUntil)
          yield* newKey(cell, new Date(now))
        }))
        // forgotten now, and again once an enclosing transaction (an operator request's) committed
        const forget = Effect.sync(() => {
          remembered.delete(`${cell.tenantId}/${cell.environment}`)
        })
        yield* forget
        yield* afterCommit(forget)
        const row = yield* activeRow(cell)
        return { kid: row!.kid, retired_publish_until: publishUntil }
      })

    /** The public key set of a cell by its path (unauthenticated): an unknown cell is 404. */
    const jwksOf = (tenantId: string, environment: string) =>
      Effect.gen(function*() {
        yield* platform.liveEnvironment(tenantId, environment)
        return yield* jwks({ tenantId, environment: environment as CellRef["environment"] })
      })

    return {
      issuer,
      jwksOf: (tenantId: string, environment: string) => dieOnSqlError(jwksOf(tenantId, environment)),
      sign: (cell: CellRef, claims: InvocationClaims) => dieOnSqlError(sign(cell, claims)),
      jwks: (cell: CellRef) => dieOnSqlError(jwks(cell)),
      rotate: (cell: CellRef) => dieOnSqlError(rotate(cell))
    } as const
  }),
  dependencies: [SigningRepo.Default, Secrets.Default, PlatformRepo.Default]
}) {}
