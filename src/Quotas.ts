/**
 * Quotas (D16). The cell holds its limits beside its rate limiter (`GetQuotaLimits`; restored with
 * the cell, reloaded when an operator sets one); the counters are in Postgres, changed only by the
 * statements of what they count (src/Quotas/Queries.ts), so they hold across processes and restarts.
 */
import { Clock, Effect } from "effect"

import { Cells } from "./Cells/Cells.js"
import { getQuotaLimits, ReloadQuotaLimits } from "./Cells/Protocol.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { QUOTA_NAMES, type QuotaLimits, type QuotaName, type QuotaUsed, toQuota } from "./Domain/Quotas.js"
import { notFound } from "./Kernel/Errors.js"
import type { EnvironmentName } from "./Kernel/Ids.js"
import type { CellRef } from "./Kernel/Principal.js"
import { afterCommit } from "./Kernel/UnitOfWork.js"
import { QuotasRepo } from "./Quotas/Repo.js"

export class Quotas extends Effect.Service<Quotas>()("Quotas", {
  effect: Effect.gen(function*() {
    const repo = yield* QuotasRepo
    const cells = yield* Cells
    const config = yield* AppConfig
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const all = (limits: QuotaLimits, used: QuotaUsed, at: Date) => QUOTA_NAMES.map((n) => toQuota(n, limits[n], used[n], at))

    /** The cell's limits, as its cell holds them. */
    const limitsOf = (cell: CellRef) => cells.send(cell, getQuotaLimits)

    /** `GET P/quotas`. */
    const list = (cell: CellRef) =>
      Effect.gen(function*() {
        const limits = yield* limitsOf(cell)
        const at = yield* now
        return { items: all(limits, yield* repo.used(cell, at), at), next_cursor: null }
      })

    const live = (tenantId: string, environment: EnvironmentName) =>
      Effect.gen(function*() {
        const cell = { tenantId, environment }
        if (!(yield* repo.live(cell))) return yield* notFound("environment", "environment")
        return cell
      })

    /** The operator's view: the limits as stored (the cell is not started for it). */
    const operatorList = (tenantId: string, environment: EnvironmentName) =>
      Effect.gen(function*() {
        const cell = yield* live(tenantId, environment)
        const limits = yield* repo.limits(cell, config.quotas[environment])
        const at = yield* now
        return { items: all(limits, yield* repo.used(cell, at), at), next_cursor: null }
      })

    /** Sets a limit; once committed, the cell (if running) reads its limits again. */
    const setLimit = (tenantId: string, environment: EnvironmentName, name: QuotaName, limit: number) =>
      Effect.gen(function*() {
        const cell = yield* live(tenantId, environment)
        const at = yield* now
        yield* repo.setLimit(cell, name, limit, at)
        yield* afterCommit(Effect.asVoid(cells.sendIfRunning(cell, new ReloadQuotaLimits())))
        return toQuota(name, limit, (yield* repo.used(cell, at))[name], at)
      })

    return {
      limitsOf,
      list: (cell: CellRef) => dieOnSqlError(list(cell)),
      operatorList: (tenantId: string, environment: EnvironmentName) => dieOnSqlError(operatorList(tenantId, environment)),
      setLimit: (tenantId: string, environment: EnvironmentName, name: QuotaName, limit: number) =>
        dieOnSqlError(setLimit(tenantId, environment, name, limit))
    }
  }),
  dependencies: [QuotasRepo.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Quotas (scripts/layers.ts) ----
export { quotaExceeded, quotaMessage } from "./Quotas/Exceeded.js"
export { QuotasRepo } from "./Quotas/Repo.js"
