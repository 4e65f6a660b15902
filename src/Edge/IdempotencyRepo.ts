/**
 * SQL of idempotency records (D5): one row per (tenant, environment, actor, method, path, key),
 * written in the same transaction as the mutation it answers, so a record exists exactly when its
 * effect committed. A request in flight holds a transaction-scoped advisory lock on its scope:
 * Postgres releases it at commit, at rollback, and when the holder's connection dies.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"

/** Row shapes decoded on hot paths, made once (a schema made per call is compiled per call). */
const LockRow = Schema.Struct({ checked: Schema.String, locked: Schema.Boolean })

export interface Scope {
  readonly tenantId: string
  readonly environment: string
  readonly actor: string
  readonly method: string
  readonly path: string
  readonly key: string
}

export interface StoredResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

export const RecordRow = Schema.Struct({
  fingerprint: Schema.String,
  status: Schema.Number,
  headers: Schema.Record({ key: Schema.String, value: Schema.String }),
  body: Schema.String,
  expires_at: Rows.Time
})
export type RecordRow = typeof RecordRow.Type

/** The advisory lock key of a scope (64-bit hash of all its parts). */
const lockKey = (s: Scope) => [s.tenantId, s.environment, s.actor, s.method, s.path, s.key].join("\n")

export class IdempotencyRepo extends Effect.Service<IdempotencyRepo>()("IdempotencyRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const where = (s: Scope) =>
      sql`tenant_id = ${s.tenantId} AND environment = ${s.environment} AND actor = ${s.actor}
          AND method = ${s.method} AND path = ${s.path} AND key = ${s.key}`

    /**
     * Takes the scope's lock for the current transaction; false when another transaction holds it.
     * The transaction also checks its client every second while a statement runs
     * (`client_connection_check_interval`, Postgres 14+): if this process dies while a statement
     * waits (on a row lock, say), Postgres ends the transaction, and releases the lock, within a
     * second instead of when the wait ends. Idle in a transaction, a dead client is noticed at once.
     */
    const tryLock = (s: Scope) =>
      sql`SELECT set_config('client_connection_check_interval', '1000', true) AS checked,
                 pg_try_advisory_xact_lock(hashtextextended(${lockKey(s)}, 0)) AS locked`.pipe(
        Rows.single(LockRow),
        Effect.map((r) => r.locked)
      )

    const find = (s: Scope) =>
      sql`SELECT fingerprint, status, headers, body, expires_at FROM idempotency_keys WHERE ${where(s)}`
        .pipe(Rows.maybe(RecordRow))

    const remove = (s: Scope) => sql`DELETE FROM idempotency_keys WHERE ${where(s)}`.pipe(Rows.none)

    const insert = (s: Scope, fingerprint: string, response: StoredResponse, at: Date, expiresAt: Date) =>
      sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint,
                                        status, headers, body, created_at, expires_at)
          VALUES (${s.tenantId}, ${s.environment}, ${s.actor}, ${s.method}, ${s.path}, ${s.key}, ${fingerprint},
                  ${response.status}, ${JSON.stringify(response.headers)}::jsonb, ${response.body},
                  ${at}, ${expiresAt})`.pipe(Rows.none)

    /** Deletes records past the replay window; how many. */
    const sweep = (at: Date) => sql`DELETE FROM idempotency_keys WHERE expires_at <= ${at} RETURNING key`.pipe(Effect.map((r) => r.length))

    return { tryLock, find, remove, insert, sweep } as const
  })
}) {}
