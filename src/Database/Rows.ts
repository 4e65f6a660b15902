/**
 * Rows decoded with a Schema: each repo says what its rows are, and a row that does not match is a
 * defect (a bug, or a migration out of step with the code), never a cast. Column types as the
 * Postgres client returns them: `timestamptz` as a Date, `jsonb` parsed, `bigint`/`count(*)` as a
 * decimal string.
 */
import { type SqlClient, Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"

import * as Direct from "./Direct.js"

/** A `timestamptz` column. */
export const Time = Schema.DateFromSelf
/** A nullable `timestamptz` column. */
export const TimeOrNull = Schema.NullOr(Schema.DateFromSelf)
/** A `bigint` or `count(*)` column (a decimal string), or an `integer` one. */
export const Int8 = Schema.Union(Schema.Number, Schema.NumberFromString)
/** A `jsonb` object column. */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
/** A `bytea` column. */
export const Bytes = Schema.Uint8ArrayFromSelf

type Query<E, R> = Effect.Effect<ReadonlyArray<unknown>, E, R>

const isStatement = (u: unknown): u is Statement.Statement<unknown> => Statement.isFragment(u) && "compile" in u

/**
 * A statement (rather than any effect of rows) runs through `Direct.execute` (in a transaction,
 * straight to its connection): its error and requirements are the statement's own (`SqlError`,
 * none), which are the query's.
 */
const run = <E, R>(query: Query<E, R>): Query<E, R> => isStatement(query) ? Direct.execute(query) as Query<any, never> : query

/** Every row, decoded. */
export const all = <A, I>(row: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknown(Schema.Array(row))
  return <E, R>(query: Query<E, R>): Effect.Effect<ReadonlyArray<A>, E, R> =>
    Effect.flatMap(run(query), (rows) => Effect.orDie(decode(rows)))
}

/** The first row, decoded, if there is one. */
export const first = <A, I>(row: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknown(row)
  return <E, R>(query: Query<E, R>): Effect.Effect<Option.Option<A>, E, R> =>
    Effect.flatMap(run(query), (rows) => rows.length === 0 ? Effect.succeedNone : Effect.asSome(Effect.orDie(decode(rows[0]))))
}

/** The first row, decoded, or undefined. */
export const maybe = <A, I>(row: Schema.Schema<A, I>) => {
  const take = first(row)
  return <E, R>(query: Query<E, R>): Effect.Effect<A | undefined, E, R> => Effect.map(take(query), Option.getOrUndefined)
}

/** A statement whose rows are not read. */
export const none = <E, R>(query: Query<E, R>): Effect.Effect<void, E, R> => Effect.asVoid(run(query))

/** The one row a statement returns (an `INSERT ... RETURNING`), decoded; none is a defect. */
export const single = <A, I>(row: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknown(row)
  return <E, R>(query: Query<E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(
      run(query),
      (rows) => rows.length === 0 ? Effect.dieMessage("the statement returned no row") : Effect.orDie(decode(rows[0]))
    )
}

/**
 * `writes` (INSERTs, UPDATEs, DELETEs) as the `WITH` clause of the statement it starts: each a CTE,
 * which Postgres runs whether or not the statement reads it; nothing when there is none.
 */
export const withWrites = (sql: SqlClient.SqlClient, writes: ReadonlyArray<Statement.Fragment>): Statement.Fragment =>
  writes.length === 0
    ? sql``
    : sql`WITH ${sql.join(", ", false)(writes.map((write, i) => sql`${sql.literal(`write${i}`)} AS (${write})`))}`

/**
 * `reads` (queries of at most one row each) as result columns `read0`, `read1`... of the statement
 * that carries them (`UnitOfWork.readWithCommit`): each row as JSON (`to_jsonb`), null when none.
 */
export const readColumns = (sql: SqlClient.SqlClient, reads: ReadonlyArray<Statement.Fragment>): Statement.Fragment =>
  sql.join(", ", false)(reads.map((read, i) => sql`(SELECT to_jsonb(r) FROM (${read}) r LIMIT 1) AS ${sql.literal(`read${i}`)}`))

/** The values of `readColumns` in the row a statement returned (none: every read found nothing). */
export const readValues = (row: Record<string, unknown> | undefined, count: number): ReadonlyArray<unknown> =>
  Array.from({ length: count }, (_, i) => row?.[`read${i}`] ?? undefined)
