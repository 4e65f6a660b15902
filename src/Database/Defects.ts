import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/**
 * Infrastructure failures are defects at the service edge (a 500 envelope and a log line), never
 * domain errors; those that say the database cannot be reached are a 503 (`isDatabaseUnavailable`).
 */
export const dieOnSqlError = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, SqlError>, R> =>
  Effect.catchIf(self, (e): e is Extract<E, SqlError> => e instanceof SqlError, Effect.die) as any

/**
 * Postgres SQLSTATEs of a database that is going or gone: connection exceptions (08xxx), shutdowns
 * (57P01-57P03), too many connections, and a session ended by the server for sitting idle in a
 * transaction (25P03: this process was stalled mid-transaction, issue 41) or idle (57P05).
 */
const UNAVAILABLE_STATES = /^(08...|57P0[1-35]|53300|25P03)$/
const UNREACHABLE_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN"])

/**
 * Whether a defect says the database cannot be reached (pool cannot connect, connection lost or
 * refused, server shutting down): a transient condition, answered 503 and safe to retry, unlike a
 * failing statement (a bug: 500).
 */
export const isDatabaseUnavailable = (defect: unknown): boolean => {
  if (!(defect instanceof SqlError)) return false
  if (defect.message.startsWith("Failed to acquire connection")) return true
  return isLostConnection(defect.cause)
}

/** Whether an error of the Postgres driver says its connection is gone (server shut down, refused, reset). */
export const isLostConnection = (error: unknown): boolean => {
  const cause = error as { code?: unknown; message?: unknown } | undefined
  const code = typeof cause?.code === "string" ? cause.code : ""
  return UNAVAILABLE_STATES.test(code) || UNREACHABLE_CODES.has(code) ||
    (typeof cause?.message === "string" && /Connection terminated|connection error and is not queryable/i.test(cause.message))
}
