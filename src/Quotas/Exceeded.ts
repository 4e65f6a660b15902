/** The answer past an exhausted quota (D16): 429 `quota_exceeded` with `Retry-After`. */
import { Effect } from "effect"

import { nextUtcMidnight, type QuotaName, retryAfterSeconds } from "../Domain/Quotas.js"
import { RateLimited } from "../Kernel/Errors.js"
import { setResponseHeader, type UnitOfWork } from "../Kernel/UnitOfWork.js"

/** Why an exhausted quota refuses, and when (or how) it has room again. */
export const quotaMessage = (name: QuotaName, limit: number, at: Date): string => {
  switch (name) {
    case "runs_per_day":
      return `This environment admitted ${limit} runs today, its runs_per_day quota; it admits runs again at ${
        nextUtcMidnight(at).toISOString()
      }`
    case "tokens_per_day":
      return `Today's model calls of this environment used its tokens_per_day quota (${limit} tokens); it admits runs again at ${
        nextUtcMidnight(at).toISOString()
      }`
    case "concurrent_runs":
      return `This environment has ${limit} runs that have not finished, its concurrent_runs quota; retry once one has finished`
    case "storage_bytes":
      return `This does not fit this environment's storage_bytes quota (${limit} bytes, files and memory values); delete files ` +
        `or memory keys, or ask the operator to raise it`
    case "webhook_endpoints":
      return `This environment has ${limit} webhook endpoints, its webhook_endpoints quota; delete one, or ask the operator to raise it`
    case "schedules":
      return `This environment has ${limit} schedules, its schedules quota; delete one, or ask the operator to raise it`
  }
}

/** Fails the request with 429 `quota_exceeded`, `Retry-After` the seconds until the quota has room again. */
export const quotaExceeded = (name: QuotaName, limit: number, at: Date): Effect.Effect<never, RateLimited, UnitOfWork> =>
  Effect.zipRight(
    setResponseHeader("retry-after", String(retryAfterSeconds(name, at))),
    Effect.fail(new RateLimited({ code: "quota_exceeded", message: quotaMessage(name, limit, at) }))
  )
