/**
 * A transaction's BEGIN and COMMIT sent with its first and last statements
 * (src/Database/Pipelined.ts), through @effect/sql on a real Postgres: the round trips a
 * transaction costs, and that what commits and what rolls back is as before.
 */
import type { Statement } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber } from "effect"

import { configureConnections } from "../src/Database/Client.js"
import * as Direct from "../src/Database/Direct.js"
import { commitsWith, sendAhead } from "../src/Database/Pipelined.js"
import { countedConnection, pg, Pool } from "./support/Database.js"
import { realSleep } from "./support/Waiting.js"

/** @effect/sql on one connection configured as the service's, counting its round trips. */
const oneConnection = Effect.gen(function*() {
  const { db, sql, trips } = yield* countedConnection((pool) => configureConnections(pool, 10))
  yield* sql`CREATE TABLE t (a int PRIMARY KEY)`
  yield* sql`CREATE TABLE p (id int PRIMARY KEY)`
  yield* sql`CREATE TABLE c (p int REFERENCES p DEFERRABLE INITIALLY DEFERRED)`
  /** The first column of `table`'s rows as another connection sees them (what committed). */
  const committed = (table = "t") =>
    Effect.promise(async () => {
      const other = new pg.Client({ connectionString: db.url })
      await other.connect()
      try {
        return (await other.query(`SELECT * FROM ${table} ORDER BY 1`)).rows.map((r) => Object.values(r)[0])
      } finally {
        await other.end()
      }
    })
  const tripsOf = <A, E>(effect: Effect.Effect<A, E>) =>
    Effect.gen(function*() {
      const before = trips.count
      const exit = yield* Effect.exit(effect)
      return { exit, trips: trips.count - before }
    })
  return { db, sql, committed, tripsOf }
})

/** What Postgres (or the connection) said of a failed transaction. */
const reason = (exit: Exit.Exit<unknown, unknown>) => {
  const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
  return String((error as { cause?: unknown } | undefined)?.cause ?? error)
}

describe("BEGIN and COMMIT with their neighbours", () => {
  it.scoped("a transaction of three statements is three round trips; its last statement answers its own rows", () =>
    Effect.gen(function*() {
      const { committed, sql, tripsOf } = yield* oneConnection
      const { exit, trips } = yield* tripsOf(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t VALUES (${1})`
        yield* sql`INSERT INTO t VALUES (${2})`
        return yield* commitsWith(sql`INSERT INTO t VALUES (${3}) RETURNING a`)
      })))
      expect(exit).toEqual(Exit.succeed([{ a: 3 }]))
      // BEGIN with the first, COMMIT with the last: 3 round trips, where they were 5
      expect(trips).toBe(3)
      expect(yield* committed()).toEqual([1, 2, 3])
      // without commitsWith, the COMMIT is a round trip of its own (they were 3)
      const plain = yield* tripsOf(sql.withTransaction(sql`INSERT INTO t VALUES (${4})`))
      expect(plain.trips).toBe(2)
      // a whole transaction of one statement in one round trip
      expect(yield* tripsOf(sql.withTransaction(commitsWith(sql`INSERT INTO t VALUES (${5})`)))).toEqual({
        exit: Exit.succeed([]),
        trips: 1
      })
      // a transaction that sends nothing costs nothing
      expect((yield* tripsOf(sql.withTransaction(Effect.void))).trips).toBe(0)
      expect(yield* committed()).toEqual([1, 2, 3, 4, 5])
    }))

  it.scoped("a failing statement, first, middle or last, commits nothing; the connection goes on", () =>
    Effect.gen(function*() {
      const { committed, sql } = yield* oneConnection
      yield* sql`INSERT INTO t VALUES (${1})`
      for (const failing of ["first", "middle", "last"] as const) {
        const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          if (failing === "first") yield* sql`INSERT INTO t VALUES (${1})` // duplicate key
          yield* sql`INSERT INTO t VALUES (${10})`
          if (failing === "middle") yield* sql`INSERT INTO t VALUES (${1})`
          yield* commitsWith(sql`INSERT INTO t VALUES (${failing === "last" ? 1 : 11})`)
        })))
        expect(Exit.isFailure(exit), failing).toBe(true)
        expect(yield* committed(), failing).toEqual([1])
      }
      // a statement Postgres cannot parse, sent with BEGIN; then the same connection's next transaction
      expect(Exit.isFailure(yield* Effect.exit(sql.withTransaction(sql`SELEKT ${1}`)))).toBe(true)
      yield* sql.withTransaction(commitsWith(sql`INSERT INTO t VALUES (${2})`))
      expect(yield* committed()).toEqual([1, 2])
    }))

  it.scoped("a COMMIT that fails (a deferred constraint) fails the last statement; nothing is kept", () =>
    Effect.gen(function*() {
      const { committed, sql } = yield* oneConnection
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t VALUES (${5})`
        yield* commitsWith(sql`INSERT INTO c VALUES (${99})`) // no p 99: refused at COMMIT
      })))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(reason(exit)).toMatch(/foreign key/)
      expect(yield* committed()).toEqual([])
      expect(yield* committed("c")).toEqual([])
      // the connection goes on, outside a transaction too (nothing of the last one is left on it)
      yield* sql`INSERT INTO t VALUES (${6})`
      expect(yield* committed()).toEqual([6])
    }))

  it.scoped("a prepared statement sent with BEGIN is prepared once; work failing before any statement leaves nothing", () =>
    Effect.gen(function*() {
      const { committed, sql } = yield* oneConnection
      for (const n of [1, 2, 3]) {
        expect(yield* sql.withTransaction(sql`SELECT ${n}::int + 1 AS n`)).toEqual([{ n: n + 1 }])
      }
      const prepared = yield* sql`SELECT statement FROM pg_prepared_statements WHERE from_sql = false AND statement LIKE ${"%+ 1 AS n"}`
      expect(prepared.length).toBe(1)
      // a transaction whose work fails before sending anything, then a statement outside any
      // transaction: it commits on its own (no BEGIN left pending on the connection)
      expect(Exit.isFailure(yield* Effect.exit(sql.withTransaction(Effect.fail("refused"))))).toBe(true)
      yield* sql`INSERT INTO t VALUES (${7})`
      expect(yield* committed()).toEqual([7])
    }))

  it.scoped("a statement after the one that carried the COMMIT is refused", () =>
    Effect.gen(function*() {
      const { committed, sql } = yield* oneConnection
      const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* commitsWith(sql`INSERT INTO t VALUES (${8})`)
        yield* sql`INSERT INTO t VALUES (${9})`
      })))
      expect(reason(exit)).toMatch(/after its transaction's COMMIT/)
      // the last statement was the point of no return: it is committed
      expect(yield* committed()).toEqual([8])
    }))

  it.scoped("a statement sent straight to the transaction's connection (Direct.execute) is the transaction's", () =>
    Effect.gen(function*() {
      const { committed, sql, tripsOf } = yield* oneConnection
      // in a transaction: its rows as the statement's own; rolled back with it; carrying the COMMIT
      const refused = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
        expect(yield* Direct.execute(sql<{ a: number }>`INSERT INTO t VALUES (${1}) RETURNING a`)).toEqual([{ a: 1 }])
        return yield* Effect.fail("refused")
      })))
      expect(Exit.isFailure(refused)).toBe(true)
      expect(yield* committed()).toEqual([])
      const kept = yield* tripsOf(sql.withTransaction(Effect.gen(function*() {
        yield* Direct.execute(sql`INSERT INTO t VALUES (${2})`)
        return yield* commitsWith(Direct.execute(sql<{ a: number }>`INSERT INTO t VALUES (${3}) RETURNING a`))
      })))
      expect(kept).toEqual({ exit: Exit.succeed([{ a: 3 }]), trips: 2 })
      // outside a transaction, without a pool given: the statement as it is
      expect(yield* Direct.execute(sql<{ a: number }>`SELECT a FROM t ORDER BY a`)).toEqual([{ a: 2 }, { a: 3 }])
      expect(yield* committed()).toEqual([2, 3])
    }))

  it.scoped("outside a transaction, a statement goes straight to a connection of the pool, given back once answered, failed or interrupted", () =>
    Effect.gen(function*() {
      const { db, sql } = yield* oneConnection
      // a pool as the service's: its connections prepared and pipelined; one to run on, one for a cancel
      const pool = yield* Effect.acquireRelease(
        Effect.sync(() => new Pool({ connectionString: db.url, max: 2 })),
        (pool) => Effect.promise(() => pool.end())
      )
      configureConnections(pool as any, 10)
      const direct = <A>(statement: Statement.Statement<A>) =>
        Direct.execute(statement).pipe(
          Effect.provideService(Direct.DirectPool, pool as unknown as Direct.DirectPool["Type"]),
          Effect.withTracerEnabled(false) // as the service runs without tracing (with it, the statement runs as it is)
        )
      // its rows; the connection back, idle
      expect(yield* direct(sql<{ n: number }>`SELECT ${41}::int + 1 AS n`)).toEqual([{ n: 42 }])
      expect({ idle: pool.idleCount, total: pool.totalCount }).toEqual({ idle: 1, total: 1 })
      // a statement Postgres refuses: its error; the connection goes on
      expect(reason(yield* Effect.exit(direct(sql`SELEKT ${1}`)))).toMatch(/syntax error/)
      expect(yield* direct(sql<{ n: number }>`SELECT ${1}::int AS n`)).toEqual([{ n: 1 }])
      // interrupted while it runs: cancelled in Postgres, its connection back for the next one at once
      const started = Date.now()
      const slept = yield* Effect.fork(direct(sql`SELECT pg_sleep(${30})`))
      yield* realSleep(300)
      yield* Fiber.interrupt(slept)
      expect(yield* direct(sql<{ n: number }>`SELECT ${2}::int AS n`)).toEqual([{ n: 2 }])
      expect(Date.now() - started).toBeLessThan(10_000)
      expect(pool.waitingCount).toBe(0)
      // its connection back once its cancelled statement's error arrived (the next one may have run on the other)
      for (let i = 0; i < 40 && pool.idleCount !== pool.totalCount; i++) yield* realSleep(50)
      expect(pool.idleCount).toBe(pool.totalCount)
    }))

  it.scoped("a statement sent ahead goes with the next one: one round trip; when it fails, the next reports its error and nothing is kept", () =>
    Effect.gen(function*() {
      const { committed, sql, tripsOf } = yield* oneConnection
      yield* sql`CREATE FUNCTION refuse(n int) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN IF n < 0 THEN RAISE EXCEPTION 'refused %', n USING ERRCODE = 'AP409'; END IF; INSERT INTO p VALUES (n); END $$`
      /** `refuse(n)` sent ahead: how it went ("sent" until answered) */
      const ahead = (n: number) =>
        Effect.gen(function*() {
          const heard: { said: string } = { said: "sent" }
          const sent = yield* sendAhead({
            text: "SELECT refuse($1)",
            values: [String(n)],
            answered: (e) => (heard.said = e === null ? "ran" : String((e as { code?: string }).code ?? e.message))
          })
          expect(sent).toBe(true)
          return heard
        })

      // it holds: BEGIN, it, the statement and the COMMIT in one round trip (its rows are not the statement's)
      let heard = { said: "" }
      const held = yield* tripsOf(sql.withTransaction(Effect.gen(function*() {
        heard = yield* ahead(1)
        return yield* commitsWith(sql`INSERT INTO t VALUES (${1}) RETURNING a`)
      })))
      expect(held).toEqual({ exit: Exit.succeed([{ a: 1 }]), trips: 1 })
      expect(heard.said).toBe("ran")
      expect(yield* committed("p")).toEqual([1])

      // it fails: the statement after it reports its error; nothing of the transaction is kept
      const failed = yield* tripsOf(sql.withTransaction(Effect.gen(function*() {
        heard = yield* ahead(-1)
        yield* sql`INSERT INTO t VALUES (${2})`
        return yield* commitsWith(sql`INSERT INTO t VALUES (${3})`)
      })))
      expect(failed.trips).toBe(2) // the statement (the one after it was not sent), then the ROLLBACK
      expect(reason(failed.exit)).toMatch(/refused -1/)
      expect(heard.said).toBe("AP409")
      expect(yield* committed()).toEqual([1])

      // the transaction ends before sending anything: it was never sent (nothing is)
      const never = yield* tripsOf(
        Effect.exit(sql.withTransaction(Effect.zipRight(Effect.tap(ahead(2), (h) => (heard = h)), Effect.fail("refused"))))
      )
      expect(never.trips).toBe(0)
      expect(heard.said).toMatch(/not sent/)
      // a transaction that commits with nothing else sent sends it
      yield* sql.withTransaction(Effect.tap(ahead(3), (h) => (heard = h)))
      expect(heard.said).toBe("ran")
      expect(yield* committed("p")).toEqual([1, 3])
      // outside a transaction it is not taken (the caller sends it itself)
      expect(yield* sendAhead({ text: "SELECT 1", values: [], answered: () => undefined })).toBe(false)
    }))
})
