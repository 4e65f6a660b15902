/** SQL of idempotency records (D5): one row per (tenant, environment, actor, method, path, key). */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"

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
  state: Schema.Literal("in_flight", "completed"),
  locked_until: Rows.TimeOrNull,
  status: Schema.NullOr(Schema.Number),
  headers: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.String })),
  body: Schema.NullOr(Schema.String),
  expires_at: Rows.Time
})
export type RecordRow = typeof RecordRow.Type

export class IdempotencyRepo extends Effect.Service<IdempotencyRepo>()("IdempotencyRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const where = (s: Scope) =>
      sql`tenant_id = ${s.tenantId} AND environment = ${s.environment} AND actor = ${s.actor}
          AND method = ${s.method} AND path = ${s.path} AND key = ${s.key}`

    /** Reserves the key (`in_flight`); false when a record exists. */
    const reserve = (s: Scope, fingerprint: string, at: Date, lockedUntil: Date, expiresAt: Date) =>
      sql`INSERT INTO idempotency_keys (tenant_id, environment, actor, method, path, key, fingerprint, state,
                                        locked_until, created_at, expires_at)
          VALUES (${s.tenantId}, ${s.environment}, ${s.actor}, ${s.method}, ${s.path}, ${s.key}, ${fingerprint},
                  'in_flight', ${lockedUntil}, ${at}, ${expiresAt})
          ON CONFLICT DO NOTHING
          RETURNING key`.pipe(Effect.map((rows) => rows.length > 0))

    const find = (s: Scope) =>
      sql`SELECT fingerprint, state, locked_until, status, headers, body, expires_at
          FROM idempotency_keys WHERE ${where(s)}`.pipe(Rows.maybe(RecordRow))

    const deleteExpired = (s: Scope, at: Date) =>
      sql`DELETE FROM idempotency_keys WHERE ${where(s)} AND expires_at <= ${at}`.pipe(Rows.none)

    /**
     * Takes over the reservation of a holder whose lock ran out. The lock is re-checked in the
     * UPDATE (not compared for equality with the value read: a timestamp Postgres wrote has
     * microseconds a JS Date drops); a racing taker blocks on the row, then sees the fresh lock.
     */
    const takeOver = (s: Scope, fingerprint: string, at: Date, lockedUntil: Date) =>
      sql`UPDATE idempotency_keys SET locked_until = ${lockedUntil}
          WHERE ${where(s)} AND state = 'in_flight' AND fingerprint = ${fingerprint} AND locked_until <= ${at}
          RETURNING key`.pipe(Effect.map((rows) => rows.length > 0))

    const complete = (s: Scope, response: StoredResponse) =>
      sql`UPDATE idempotency_keys SET state = 'completed', locked_until = NULL, status = ${response.status},
                 headers = ${JSON.stringify(response.headers)}::jsonb, body = ${response.body}
          WHERE ${where(s)} AND state = 'in_flight'`.pipe(Rows.none)

    const release = (s: Scope) => sql`DELETE FROM idempotency_keys WHERE ${where(s)} AND state = 'in_flight'`.pipe(Rows.none)

    const extend = (s: Scope, lockedUntil: Date) =>
      sql`UPDATE idempotency_keys SET locked_until = ${lockedUntil} WHERE ${where(s)} AND state = 'in_flight'`.pipe(Rows.none)

    /** Deletes records past the replay window; how many. */
    const sweep = (at: Date) => sql`DELETE FROM idempotency_keys WHERE expires_at <= ${at} RETURNING key`.pipe(Effect.map((r) => r.length))

    return { reserve, find, deleteExpired, takeOver, complete, release, extend, sweep } as const
  })
}) {}
