/**
 * Service key authentication (contract part 5). Every request reads the key from Postgres: no
 * cache can serve a revoked key, so revocation is effective on the very next request. A rotated
 * key's expiry (D17) is compared with Effect's Clock on the row already read: no other query.
 */
import { Clock, Effect } from "effect"

import { AuthenticationFailed, Unavailable } from "../Kernel/Errors.js"
import type { Principal } from "../Kernel/Principal.js"
import * as KeySecrets from "./KeySecrets.js"
import { PlatformRepo } from "./Repo.js"

/** The secret of `Authorization: Bearer <secret>`. */
const secretOf = (authorization: string | undefined) => authorization?.match(/^Bearer\s+(\S+)\s*$/i)?.[1]

const invalidKey = new AuthenticationFailed({ code: "invalid_api_key", message: "Invalid API key provided" })

export class Auth extends Effect.Service<Auth>()("Auth", {
  effect: Effect.gen(function*() {
    const repo = yield* PlatformRepo

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
        const row = yield* Effect.orDie(repo.keyBySecretHash(KeySecrets.hash(secret)))
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
        return {
          keyId: row.id,
          tenantId: row.tenant_id,
          environment: row.environment,
          scopes: row.scopes,
          kind: row.kind,
          actor: { type: "api_key", id: row.id }
        } satisfies Principal
      }).pipe(Effect.withSpan("Auth.authenticate"))

    /**
     * After a refusal (401): the key the presented secret names, when it names one of an environment
     * not yet purged — a revoked or expired key, a key of an environment being deleted, or an
     * unknown secret with a key's display prefix — so the failure is audited there (D16, D19).
     * Otherwise none.
     */
    const refusedKey = (authorization: string | undefined) =>
      Effect.gen(function*() {
        const secret = secretOf(authorization)
        if (secret === undefined || !KeySecrets.looksLikeKey(secret)) return undefined
        const row = yield* repo.keyOfRefusedSecret(KeySecrets.hash(secret), KeySecrets.prefixOf(secret))
        return row === undefined ? undefined : { keyId: row.id, tenantId: row.tenant_id, environment: row.environment }
      }).pipe(Effect.orDie, Effect.withSpan("Auth.refusedKey"))

    return { authenticate, refusedKey } as const
  }),
  dependencies: [PlatformRepo.Default]
}) {}
