/**
 * The audit log (D16): one append-only entry per mutation, per authentication failure that names a
 * key of an environment, and per operator action about an environment. The request pipeline writes
 * them (src/Edge/AuditTrail.ts: a mutation's in the transaction of the mutation and its stored
 * idempotent response); this service appends (one statement), lists them newest first, and sweeps
 * those older than their environment's `audit_retention_days` on Effect's Clock.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Clock, Effect, Schedule } from "effect"

import { AuditRepo, type AuditRow } from "./Audit/Repo.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError } from "./Database/Defects.js"
import type { AuditActorType, AuditEntry, AuditListParams } from "./Domain/Audit.js"
import * as Cursor from "./Kernel/Cursor.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { traced } from "./Kernel/Spans.js"
import { ordered, timeParam } from "./Kernel/TimeRange.js"

/** What an entry says; its id and time are given when it is written. */
export interface AuditRecord {
  readonly cell: CellRef
  readonly actor: { readonly type: AuditActorType; readonly id: string }
  readonly keyId: string | null
  /** the operationId */
  readonly action: string
  readonly resource: { readonly type: string; readonly id: string }
  readonly requestId: string
  readonly status: number
  readonly ip: string | null
}

const toEntry = (r: AuditRow): AuditEntry => ({
  id: r.id,
  object: "audit_entry",
  occurred_at: toIso(r.occurred_at),
  actor: { type: r.actor_type, id: r.actor_id },
  key_id: r.key_id,
  action: r.action,
  resource: { type: r.resource_type, id: r.resource_id },
  request_id: r.request_id,
  status: r.status,
  ip: r.ip
})

export class Audit extends Effect.Service<Audit>()("Audit", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* AuditRepo
    const config = yield* AppConfig

    /**
     * Appends an entry: one INSERT, in the caller's transaction when there is one, with `along`
     * (data-modifying statements of the same request) in the same statement, which also answers
     * `reads` (the request's reads that ride it: their rows, in order).
     */
    const record = (entry: AuditRecord, along?: ReadonlyArray<Statement.Fragment>, reads?: ReadonlyArray<Statement.Fragment>) =>
      Effect.gen(function*() {
        return yield* repo.insert(
          {
            cell: entry.cell,
            id: yield* makeId("aud"),
            occurred_at: new Date(yield* Clock.currentTimeMillis),
            actor_type: entry.actor.type,
            actor_id: entry.actor.id,
            key_id: entry.keyId,
            action: entry.action,
            resource_type: entry.resource.type,
            resource_id: entry.resource.id,
            request_id: entry.requestId,
            status: entry.status,
            ip: entry.ip
          },
          along,
          reads
        )
      }).pipe(Effect.orDie, traced("Audit.record"))

    /** The cell's entries, newest first, filtered (D6 cursors, bound to the filters). */
    const list = (p: Principal, params: Cursor.ListParams & AuditListParams) =>
      Effect.gen(function*() {
        const from = yield* timeParam(params.from, "from")
        const to = yield* timeParam(params.to, "to")
        yield* ordered(from, to)
        const filter = {
          from,
          to,
          action: params.action,
          resource_id: params.resource_id,
          actor_id: params.actor_id
        }
        const bound = [params.from, params.to, params.action, params.resource_id, params.actor_id].map((v) => v ?? "")
        return yield* Cursor.listPage(
          `audit:${JSON.stringify(bound)}`,
          (t, e, after, limit) => repo.list(t, e, after, limit, filter),
          toEntry
        )(p, params)
      })

    /** Deletes the entries past their environment's retention, in a transaction of its own: how many. */
    const sweep = Effect.flatMap(Clock.currentTimeMillis, (now) => sql.withTransaction(repo.sweepExpired(new Date(now)))).pipe(
      Effect.orDie,
      traced("Audit.sweep")
    )

    yield* sweep.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("audit retention sweep failed", cause)),
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.forkScoped
    )

    return {
      record,
      list: (p: Principal, params: Cursor.ListParams & AuditListParams) => dieOnSqlError(list(p, params)),
      sweep
    } as const
  }),
  dependencies: [AuditRepo.Default]
}) {}
