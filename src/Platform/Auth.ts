/**
 * Service key authentication (contract part 5). A request reads its key from Postgres unless this
 * process authenticated it lately and nothing changed since (src/Platform/KeyCache.ts): a
 * revocation or deletion is effective on the very next request here, and on other processes once
 * Postgres told them of its commit. A rotated key's expiry (D17) is compared with Effect's Clock
 * on the row, whether read now or kept: no other query.
 */
import { Clock, Effect } from "effect"

import { AuthenticationFailed, Unavailable } from "../Kernel/Errors.js"
import type { Principal } from "../Kernel/Principal.js"
import { traced } from "../Kernel/Spans.js"
import { KeyCache } from "./KeyCache.js"
import * as KeySecrets from "./KeySecrets.js"
import { PlatformRepo } from "./Repo.js"

/** The secret of `Authorization: Bearer <secret>`. */
const secretOf = (authorization: string | undefined) => authorization?.match(/^Bearer\s+(\S+)\s*$/i)?.[1]

/** D20: the failed authentications of one key are audited at most once in this many seconds. */
export const FAILURE_AUDIT_SECONDS = 60
/** Keys remembered by a process as audited lately (the least recently audited go first). */
const MAX_AUDITED = 10_000

const invalidKey = new AuthenticationFailed({ code: "invalid_api_key", message: "Invalid API key provided" })

export class Auth extends Effect.Service<Auth>()("Auth", {
  effect: Effect.gen(function*() {
    const repo = yield* PlatformRepo
    const keys = yield* KeyCache

    const authenticate = (authorization: string | undefined) =>
      Effect.gen(function*() {
        const secret = secretOf(authorization)
        if (secret === undefined) {
          return yield* new AuthenticationFailed({
            code: "missing_api_key",
            message: "Send your service key as `Authorization: Bearer <key>`"
          })
        }
        if (!KeySecrets.looksLikeKey(secret)) return yield* invalidKey
        const hash = KeySecrets.hash(secret)
        const id = Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString("base64")
        const cached = yield* keys.get(id)
        const readIn = cached === undefined ? yield* keys.epoch : undefined
        const row = cached ?? (yield* Effect.orDie(repo.keyBySecretHash(hash)))
        if (!row) return yield* invalidKey
        // Deleting a tenant or an environment denies its keys at once (D19), from the 202 on.
        if (
          row.revoked_at !== null || row.tenant_status === "deleting" || row.tenant_status === "deleted" ||
          row.env_state === "deleting" || row.env_state === "deleted"
        ) {
          return yield* new AuthenticationFailed({ code: "key_revoked", message: "This API key has been revoked" })
        }
        if (row.expires_at !== null && row.expires_at.getTime() <= (yield* Clock.currentTimeMillis)) {
          return yield* new AuthenticationFailed({
            code: "key_expired",
            message: "This API key expired (it was rotated and its grace period ended); use the key that replaced it"
          })
        }
        if (row.env_state !== "ready") {
          return yield* new Unavailable({
            code: "environment_not_ready",
            message: `Environment ${row.environment} is ${row.env_state}`
          })
        }
        if (readIn !== undefined) yield* keys.keep(id, row, readIn)
        return {
          keyId: row.id,
          tenantId: row.tenant_id,
          environment: row.environment,
          scopes: row.scopes,
          kind: row.kind,
          actor: { type: "api_key", id: row.id }
        } satisfies Principal
      }).pipe(traced("Auth.authenticate"))

    // Keys whose failed authentication this process audited lately (key id -> when), oldest first:
    // a flood of one refused key costs no write until the minute is over (D20).
    const audited = new Map<string, number>()

    /**
     * After a refusal (401): the key the presented secret is (revoked, expired, or of an
     * environment being deleted, not yet purged), when its failure is to be audited now: at most
     * once every FAILURE_AUDIT_SECONDS per key (D20). A secret that is no key's (a known display
     * prefix with another secret included) names none. Otherwise none.
     */
    const refusedKey = (authorization: string | undefined) =>
      Effect.gen(function*() {
        const secret = secretOf(authorization)
        if (secret === undefined || !KeySecrets.looksLikeKey(secret)) return undefined
        const row = yield* repo.keyOfRefusedSecret(KeySecrets.hash(secret))
        if (row === undefined) return undefined
        const now = yield* Clock.currentTimeMillis
        const last = audited.get(row.id)
        if (last !== undefined && now - last < FAILURE_AUDIT_SECONDS * 1000) return undefined
        for (const [id, at] of audited) {
          if (audited.size < MAX_AUDITED && now - at < FAILURE_AUDIT_SECONDS * 1000) break
          audited.delete(id)
        }
        audited.delete(row.id)
        audited.set(row.id, now)
        if (!(yield* repo.claimFailureAudit(row.id, new Date(now), FAILURE_AUDIT_SECONDS))) return undefined
        return { keyId: row.id, tenantId: row.tenant_id, environment: row.environment }
      }).pipe(Effect.orDie, traced("Auth.refusedKey"))

    return { authenticate, refusedKey } as const
  }),
  dependencies: [PlatformRepo.Default]
}) {}
