/**
 * SQL of idempotency records (D5): one row per (tenant, environment, actor, method, path, key),
 * written in the same transaction as the mutation it answers, so a record exists exactly when its
 * effect committed. A request in flight holds a transaction-scoped advisory lock on its scope:
 * Postgres releases it at commit, at rollback, and when the holder's connection dies.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Pipelined from "../Database/Pipelined.js"
import * as Rows from "../Database/Rows.js"
import type { StoredResponse } from "../Kernel/UnitOfWork.js"

export interface Scope {
  readonly tenantId: string
  readonly environment: string
  readonly actor: string
  readonly method: string
  readonly path: string
  readonly key: string
}

export type { StoredResponse }

/** The gate's row: the lock, and the record's columns (null: none). Made once (hot path). */
const GateRow = Schema.Struct({
  locked: Schema.Boolean,
  fingerprint: Schema.NullOr(Schema.String),
  status: Schema.NullOr(Schema.Number),
  headers: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.String })),
  body: Schema.NullOr(Schema.String),
  expires_at: Rows.TimeOrNull
})

/** The advisory lock key of a scope (64-bit hash of all its parts). */
const lockKey = (s: Scope) => [s.tenantId, s.environment, s.actor, s.method, s.path, s.key].join("\n")

export class IdempotencyRepo extends Effect.Service<IdempotencyRepo>()("IdempotencyRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const where = (s: Scope) =>
      sql`tenant_id = ${s.tenantId} AND environment = ${s.environment} AND actor = ${s.actor}
          AND method = ${s.method} AND path = ${s.path} AND key = ${s.key}`

    /**
     * Takes the scope's lock for the current transaction (`locked` false: another transaction holds
     * it), then reads the scope's record, in one round trip (the function `idempotency_gate`,
     * migration 0021: the read sees what committed before the lock was taken). The transaction
     * also checks its client every second while a statement runs
     * (`client_connection_check_interval`, Postgres 14+): if this process dies while a statement
     * waits (on a row lock, say), Postgres ends the transaction, and releases the lock, within a
     * second instead of when the wait ends. Idle in a transaction, a dead client is noticed at once.
     */
    const lockAndFind = (s: Scope) =>
      sql`SELECT * FROM idempotency_gate(${lockKey(s)}, ${s.tenantId}, ${s.environment}, ${s.actor}, ${s.method}, ${s.path}, ${s.key})`
        .pipe(
          Rows.single(GateRow),
          Effect.map((r) => ({
            locked: r.locked,
            record: r.fingerprint === null || r.status === null || r.headers === null || r.body === null || r.expires_at === null
              ? undefined
              : { fingerprint: r.fingerprint, status: r.status, headers: r.headers, body: r.body, expires_at: r.expires_at }
          }))
        )

    /**
     * The scope's claim (`idempotency_claim`, migration 0035: the lock, no record within its window
     * at `now`, an expired one deleted) sent ahead with the transaction's next statement; `answered`
     * hears whether it held (an error: it failed, or was never sent). False when it cannot be sent
     * ahead (no pipelined transaction): the caller passes the gate with `lockAndFind`.
     */
    const claimAhead = (s: Scope, now: Date, answered: (error: Error | null) => void) =>
      Pipelined.sendAhead({
        text: "CALL idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8)",
        values: [lockKey(s), s.tenantId, s.environment, s.actor, s.method, s.path, s.key, now.toISOString()],
        answered
      })

    const remove = (s: Scope) => sql`DELETE FROM idempotency_keys WHERE ${where(s)}`.pipe(Rows.none)

    /** The record's INSERT, not run: the caller writes it as a part of another statement. */
    const insert = (s: Scope, fingerprint: string, response: StoredResponse, at: Date, expiresAt: Date) =>
      sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint,
                                        status, headers, body, created_at, expires_at)
          VALUES (${s.tenantId}, ${s.environment}, ${s.actor}, ${s.method}, ${s.path}, ${s.key}, ${fingerprint},
                  ${response.status}, ${JSON.stringify(response.headers)}::jsonb, ${response.body},
                  ${at}, ${expiresAt})`

    /** Deletes records past the replay window; how many. */
    const sweep = (at: Date) => sql`DELETE FROM idempotency_keys WHERE expires_at <= ${at} RETURNING key`.pipe(Effect.map((r) => r.length))

    return { lockAndFind, claimAhead, remove, insert, sweep } as const
  })
}) {}
