/**
 * Quotas (D16): what an environment may use. `runs_per_day` and `tokens_per_day` count within the
 * UTC day and reset at the next midnight UTC; `concurrent_runs` counts the runs admitted and not
 * finished; `storage_bytes` the bytes of the environment's files and memory values; `webhook_endpoints` and
 * `schedules` (D20) how many the environment has. Limits are set by operators, with
 * defaults per environment kind in the operator config (sandbox small, production large).
 */
import { Schema } from "effect"

import { strictBody } from "../Kernel/Body.js"
import { Timestamp } from "../Kernel/Ids.js"

export const QUOTA_NAMES = [
  "runs_per_day",
  "concurrent_runs",
  "tokens_per_day",
  "storage_bytes",
  "webhook_endpoints",
  "schedules"
] as const
export const QuotaName = Schema.Literal(...QUOTA_NAMES).annotations({
  identifier: "QuotaName",
  description: "`runs_per_day`, `concurrent_runs`, `tokens_per_day`, `storage_bytes`, `webhook_endpoints` or `schedules`"
})

/** The quotas that count things an environment keeps (D20): a level, counted by their create and delete statements. */
export const LEVEL_QUOTAS = ["webhook_endpoints", "schedules"] as const
export type LevelQuota = typeof LEVEL_QUOTAS[number]
export type QuotaName = typeof QuotaName.Type

/** The quotas a run's admission is counted against. */
export const RUN_QUOTAS: ReadonlyArray<QuotaName> = ["runs_per_day", "concurrent_runs", "tokens_per_day"]

/** The limit of each quota of one environment. */
export type QuotaLimits = { readonly [K in QuotaName]: number }
export const QuotaLimits = Schema.Struct({
  runs_per_day: Schema.Number,
  concurrent_runs: Schema.Number,
  tokens_per_day: Schema.Number,
  storage_bytes: Schema.Number,
  webhook_endpoints: Schema.Number,
  schedules: Schema.Number
})

/** What the counters of an environment hold now (migration 0019 `quota_usage`), its day's already rolled over. */
export type QuotaUsed = { readonly [K in QuotaName]: number }

/** A limit: a whole number from 0 (nothing is admitted) to 2^53 - 1. */
export const QuotaLimit = Schema.Int.pipe(Schema.between(0, Number.MAX_SAFE_INTEGER)).annotations({
  description: "A whole number, 0 (nothing is admitted) to 9007199254740991"
})

export const QuotaWindow = Schema.NullOr(Schema.Literal("day")).annotations({
  description: "`day`: counted within the UTC day, reset at midnight UTC (`resets_at`); null: not a window (a level that goes " +
    "down as runs finish or files are deleted)"
})

export const Quota = Schema.Struct({
  object: Schema.Literal("quota"),
  name: QuotaName,
  limit: Schema.Number.annotations({ description: "Set by the operator (defaults per environment: sandbox small, production large)" }),
  used: Schema.Number.annotations({
    description: "`runs_per_day`: runs admitted today (UTC); `concurrent_runs`: runs admitted and not finished; " +
      "`tokens_per_day`: input and output tokens of today's model calls; `storage_bytes`: bytes of the environment's files " +
      "and workspace memory values; `webhook_endpoints`: endpoints registered; `schedules`: schedules that exist"
  }),
  window: QuotaWindow,
  resets_at: Schema.NullOr(Timestamp).annotations({ description: "The next midnight UTC for a daily quota; null otherwise" })
}).annotations({ identifier: "Quota" })
export type Quota = typeof Quota.Type

export const SetQuota = strictBody(Schema.Struct({ limit: QuotaLimit }))

const DAY_MS = 24 * 3600 * 1000

export const isDaily = (name: QuotaName): boolean => name === "runs_per_day" || name === "tokens_per_day"

/** The UTC day of `at` as `YYYY-MM-DD` (the counters' day). */
export const utcDay = (at: Date): string => at.toISOString().slice(0, 10)

/** The next midnight UTC after `at`. */
export const nextUtcMidnight = (at: Date): Date => new Date((Math.floor(at.getTime() / DAY_MS) + 1) * DAY_MS)

export const toQuota = (name: QuotaName, limit: number, used: number, at: Date): Quota => ({
  object: "quota",
  name,
  limit,
  used,
  window: isDaily(name) ? "day" : null,
  resets_at: isDaily(name) ? nextUtcMidnight(at).toISOString() : null
})

/**
 * Seconds a client should wait before retrying past an exhausted quota (`Retry-After`): until the
 * reset for a daily one; for `concurrent_runs` a second (a run may finish any moment); for
 * `storage_bytes`, `webhook_endpoints` and `schedules` a minute (room comes only from deleted
 * files, endpoints or schedules, or a raised limit).
 */
export const retryAfterSeconds = (name: QuotaName, at: Date): number =>
  isDaily(name)
    ? Math.max(1, Math.ceil((nextUtcMidnight(at).getTime() - at.getTime()) / 1000))
    : name === "concurrent_runs"
    ? 1
    : 60

/**
 * The first of `names` whose counter leaves no room for `adding` more (1 by default: a run, or a
 * token still to spend): what a refused admission or upload ran into.
 */
export const exhausted = (
  names: ReadonlyArray<QuotaName>,
  limits: QuotaLimits,
  used: QuotaUsed,
  adding: { readonly [K in QuotaName]?: number } = {}
): QuotaName | undefined => names.find((n) => used[n] + (adding[n] ?? 1) > limits[n] || (n === "tokens_per_day" && used[n] >= limits[n]))
