/**
 * Service key authentication (contract part 5). Every request reads the key from Postgres: no
 * cache can serve a revoked key, so revocation is effective on the very next request.
 */
import { Effect } from "effect"

import { AuthenticationFailed, Unavailable } from "../Kernel/Errors.js"
import type { Principal } from "../Kernel/Principal.js"
import * as KeySecrets from "./KeySecrets.js"
import { PlatformRepo } from "./Repo.js"

const invalidKey = new AuthenticationFailed({ code: "invalid_api_key", message: "Invalid API key provided" })

export class Auth extends Effect.Service<Auth>()("Auth", {
  effect: Effect.gen(function*() {
    const repo = yield* PlatformRepo

    const authenticate = (authorization: string | undefined) =>
      Effect.gen(function*() {
        const match = authorization?.match(/^Bearer\s+(\S+)\s*$/i)
        if (!match) {
          return yield* new AuthenticationFailed({
            code: "missing_api_key",
            message: "Send your service key as `Authorization: Bearer <key>`"
          })
        }
        const secret = match[1]!
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

    return { authenticate } as const
  }),
  dependencies: [PlatformRepo.Default]
}) {}
