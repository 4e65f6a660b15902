/** SQL of actor sessions: tokens are stored as a hash, bound to the key that made them. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

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

    /** The user of a live token of the cell whose user is active and whose key is not revoked. */
    const userOfToken = (cell: CellRef, tokenHash: string, at: Date) =>
      sql`SELECT s.user_id FROM actor_sessions s
          JOIN users u ON u.id = s.user_id AND u.status = 'active'
          JOIN api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
          WHERE s.token_hash = ${tokenHash} AND s.tenant_id = ${cell.tenantId} AND s.environment = ${cell.environment}
            AND s.expires_at > ${at}`.pipe(Rows.maybe(Schema.Struct({ user_id: Schema.String })))

    return { insert, userOfToken } as const
  })
}) {}
