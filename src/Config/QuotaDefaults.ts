/**
 * The quota limits (D16) an environment has until an operator sets its own: one set for sandboxes
 * (small: trying things out) and one for production (large), each limit from the environment
 * (`QUOTA_SANDBOX_RUNS_PER_DAY`, `QUOTA_PRODUCTION_STORAGE_BYTES`, ...).
 */
import { Config } from "effect"

import type { QuotaLimits, QuotaName } from "../Domain/Quotas.js"
import type { EnvironmentName } from "../Kernel/Ids.js"

export type QuotaDefaults = { readonly [E in EnvironmentName]: QuotaLimits }

const GiB = 1024 * 1024 * 1024

export const defaultQuotaDefaults: QuotaDefaults = {
  sandbox: {
    runs_per_day: 10_000,
    concurrent_runs: 200,
    tokens_per_day: 10_000_000,
    storage_bytes: GiB,
    webhook_endpoints: 16,
    schedules: 100
  },
  production: {
    runs_per_day: 1_000_000,
    concurrent_runs: 2_000,
    tokens_per_day: 1_000_000_000,
    storage_bytes: 100 * GiB,
    webhook_endpoints: 16,
    schedules: 100
  }
}

const limit = (environment: EnvironmentName, name: QuotaName) => {
  const variable = `QUOTA_${environment.toUpperCase()}_${name.toUpperCase()}`
  return Config.integer(variable).pipe(
    Config.withDefault(defaultQuotaDefaults[environment][name]),
    Config.validate({
      message: `${variable} must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}`,
      validation: (n) => n >= 0 && n <= Number.MAX_SAFE_INTEGER
    })
  )
}

const limitsOf = (environment: EnvironmentName) =>
  Config.all({
    runs_per_day: limit(environment, "runs_per_day"),
    concurrent_runs: limit(environment, "concurrent_runs"),
    tokens_per_day: limit(environment, "tokens_per_day"),
    storage_bytes: limit(environment, "storage_bytes"),
    webhook_endpoints: limit(environment, "webhook_endpoints"),
    schedules: limit(environment, "schedules")
  })

export const quotaDefaultsConfig: Config.Config<QuotaDefaults> = Config.all({
  sandbox: limitsOf("sandbox"),
  production: limitsOf("production")
})
