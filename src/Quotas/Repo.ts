/** Quota limits as the operator set them, and what the counters hold (D16): the Quotas service's SQL. */
import { SqlClient } from "@effect/sql"
import { Effect, Record, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { type QuotaLimits, QuotaName } from "../Domain/Quotas.js"
import type { CellRef } from "../Kernel/Principal.js"
import { int8, usedNow } from "./Queries.js"

const LimitRow = Schema.Struct({ name: QuotaName, limit: Rows.Int8 })

export class QuotasRepo extends Effect.Service<QuotasRepo>()("QuotasRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The limits an operator set for the cell (the others have their defaults). */
    const limitsSet = (cell: CellRef) =>
      sql`SELECT name, "limit" FROM quota_limits WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`
        .pipe(Rows.all(LimitRow), Effect.map((rows) => new Map(rows.map((r) => [r.name, r.limit] as const))))

    /** The cell's limits: the operator's where set, else `defaults` (its environment kind's). */
    const limits = (cell: CellRef, defaults: QuotaLimits) =>
      Effect.map(
        limitsSet(cell),
        (set): QuotaLimits => Record.map(defaults, (limit, name) => set.get(name) ?? limit)
      )

    const setLimit = (cell: CellRef, name: QuotaName, limit: number, at: Date) =>
      sql`INSERT INTO quota_limits (tenant_id, environment, name, "limit", updated_at)
          VALUES (${cell.tenantId}, ${cell.environment}, ${name}, ${int8(limit)}, ${at})
          ON CONFLICT (tenant_id, environment, name) DO UPDATE SET "limit" = EXCLUDED."limit", updated_at = EXCLUDED.updated_at`
        .pipe(Rows.none)

    const used = (cell: CellRef, at: Date) => usedNow(sql, cell, at)

    /** Whether the cell is an environment of an active tenant, not deleted nor being deleted. */
    const live = (cell: CellRef) =>
      sql`SELECT 1 FROM environments e JOIN tenants t ON t.id = e.tenant_id
          WHERE e.tenant_id = ${cell.tenantId} AND e.name = ${cell.environment} AND t.status = 'active'
            AND e.state NOT IN ('deleting', 'deleted')`.pipe(Effect.map((rows) => rows.length > 0))

    return { limits, setLimit, used, live }
  })
}) {}
