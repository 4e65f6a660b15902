/**
 * SQL of actor sessions: tokens are stored as a hash, bound to the key that made them; the identity
 * provider assertions already used (each makes one session).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { CellRef } from "../Kernel/Principal.js"

export class ActorSessionsRepo extends Effect.Service<ActorSessionsRepo>()("ActorSessionsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const insert = (s: {
      id: string
      cell: CellRef
      userId: string
      keyId: string
      tokenHash: string
      expiresAt: Date
      at: Date
    }) =>
      sql`INSERT INTO actor_sessions (id, tenant_id, environment, user_id, key_id, token_hash, expires_at, created_at)
          VALUES (${s.id}, ${s.cell.tenantId}, ${s.cell.environment}, ${s.userId}, ${s.keyId}, ${s.tokenHash},
                  ${s.expiresAt}, ${s.at})`.pipe(Rows.none)

    /**
     * The user of a live token made with this key (D19: a token works only with the key that
     * created its session) in its cell, whose user is active and whose key is not revoked.
     */
    const userOfToken = (key: CellRef & { readonly keyId: string }, tokenHash: string, at: Date) =>
      sql`SELECT s.user_id FROM actor_sessions s
          JOIN users u ON u.id = s.user_id AND u.status = 'active'
          JOIN api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
          WHERE s.token_hash = ${tokenHash} AND s.tenant_id = ${key.tenantId} AND s.environment = ${key.environment}
            AND s.key_id = ${key.keyId} AND s.expires_at > ${at}`.pipe(Rows.maybe(Schema.Struct({ user_id: Schema.String })))

    /**
     * Records an assertion of the cell's identity provider as used (D19); false if it already was
     * (a row past its `expires_at` counts as gone, swept or not).
     */
    const useAssertion = (a: { cell: CellRef; issuer: string; jti: string; expiresAt: Date; at: Date }) =>
      sql`INSERT INTO used_assertions (tenant_id, environment, issuer, jti, expires_at)
          VALUES (${a.cell.tenantId}, ${a.cell.environment}, ${a.issuer}, ${a.jti}, ${a.expiresAt})
          ON CONFLICT (tenant_id, environment, issuer, jti) DO UPDATE SET expires_at = EXCLUDED.expires_at
            WHERE used_assertions.expires_at < ${a.at}
          RETURNING jti`.pipe(Rows.first(Schema.Struct({ jti: Schema.String })), Effect.map(Option.isSome))

    /** Deletes up to `limit` used assertions past their `expires_at` (any cell; rows another sweep holds are skipped). */
    const sweepUsedAssertions = (at: Date, limit: number) =>
      sql`DELETE FROM used_assertions WHERE (tenant_id, environment, issuer, jti) IN (
            SELECT tenant_id, environment, issuer, jti FROM used_assertions WHERE expires_at < ${at}
            LIMIT ${limit} FOR UPDATE SKIP LOCKED)`.pipe(Rows.none)

    return { insert, userOfToken, useAssertion, sweepUsedAssertions } as const
  })
}) {}
