import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"

/** Infrastructure failures are defects at the service edge (a 500 envelope and a log line), never domain errors. */
export const dieOnSqlError = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, SqlError>, R> =>
  Effect.catchIf(self, (e): e is Extract<E, SqlError> => e instanceof SqlError, Effect.die) as any
