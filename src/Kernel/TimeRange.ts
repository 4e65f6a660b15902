/**
 * `from`/`to` query parameters of reads over time (D16: usage, the audit log): RFC 3339 times as
 * the schema admits them (`DateTimeParam`), as Dates; `from` must not be after `to`.
 */
import { Effect } from "effect"

import { invalid, type InvalidRequest } from "./Errors.js"

/** The time a parameter gives (400 `parameter_invalid` naming it if it is no real time), or undefined. */
export const timeParam = (value: string | undefined, param: string): Effect.Effect<Date | undefined, InvalidRequest> => {
  if (value === undefined) return Effect.succeed(undefined)
  const d = new Date(value)
  return /^\d{4}-\d{2}-\d{2}T/.test(value) && !Number.isNaN(d.getTime())
    ? Effect.succeed(d)
    : Effect.fail(invalid("parameter_invalid", `${param} must be an RFC 3339 time`, param))
}

/** 400 `parameter_invalid` (param `from`) when `from` is after `to`. */
export const ordered = (from: Date | undefined, to: Date | undefined): Effect.Effect<void, InvalidRequest> =>
  from !== undefined && to !== undefined && from.getTime() > to.getTime()
    ? Effect.fail(invalid("parameter_invalid", "from must not be after to", "from"))
    : Effect.void
