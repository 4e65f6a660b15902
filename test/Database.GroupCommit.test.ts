/**
 * Statements that are each a transaction of their own, sent in one turn of the event loop, go to
 * Postgres as one group (src/Database/GroupCommit.ts): one round trip and one commit; a failing one
 * fails alone; prepared statements stay consistent on the connection.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"

import { configureConnections } from "../src/Database/Client.js"
import { type GroupPool, makeGroupCommit } from "../src/Database/GroupCommit.js"
import { statementNameOf } from "../src/Database/Prepared.js"
import { countedConnection } from "./support/Database.js"

const setup = Effect.gen(function*() {
  const { pool, sql, trips } = yield* countedConnection((pool) => configureConnections(pool, 10))
  yield* sql`CREATE TABLE t (a int PRIMARY KEY, cell text NOT NULL)`
  const group = makeGroupCommit(pool as GroupPool, statementNameOf)
  const insert = (a: number, cell = "c") => group.send(sql<{ a: number }>`INSERT INTO t VALUES (${a}, ${cell}) RETURNING a`, cell)
  const kept = Effect.map(sql<{ a: number }>`SELECT a FROM t ORDER BY a`, (rows) => rows.map((r) => r.a))
  return { sql, trips, group, insert, kept }
})

describe("group commit", () => {
  it.scoped("statements sent in one turn are one round trip; each gets its own rows", () =>
    Effect.gen(function*() {
      const { insert, kept, trips } = yield* setup
      const before = trips.count
      const answers = yield* Effect.all([1, 2, 3, 4, 5].map((a) => insert(a, `cell${6 - a}`)), { concurrency: "unbounded" })
      expect(answers).toEqual([[{ a: 1 }], [{ a: 2 }], [{ a: 3 }], [{ a: 4 }], [{ a: 5 }]])
      expect(trips.count - before).toBe(1)
      expect(yield* kept).toEqual([1, 2, 3, 4, 5])
      // each alone in its turn: a round trip each
      const then = trips.count
      for (const a of [6, 7]) yield* insert(a)
      expect(trips.count - then).toBe(2)
    }))

  it.scoped("a failing statement fails alone; the others of its group commit", () =>
    Effect.gen(function*() {
      const { insert, kept } = yield* setup
      yield* insert(2)
      const exits = yield* Effect.all([1, 2, 3].map((a) => Effect.exit(insert(a))), { concurrency: "unbounded" })
      expect(exits.map(Exit.isSuccess)).toEqual([true, false, true])
      expect(yield* kept).toEqual([1, 2, 3])
    }))

  it.scoped("prepared statements stay right on the connection through groups that fail", () =>
    Effect.gen(function*() {
      const { group, kept, sql } = yield* setup
      // four texts of one insert: prepared under a name each on first use
      const texts = {
        A: (a: number, cell: string) => sql<{ a: number }>`INSERT INTO t VALUES (${a}, ${cell}) RETURNING a`,
        B: (a: number, cell: string) => sql<{ a: number }>`INSERT INTO t (a, cell) VALUES (${a}, ${cell}) RETURNING a`,
        C: (a: number, cell: string) => sql<{ a: number }>`INSERT INTO t (cell, a) VALUES (${cell}, ${a}) RETURNING a`,
        D: (a: number, cell: string) => sql<{ a: number }>`INSERT INTO t (a, cell) SELECT ${a}, ${cell} RETURNING a`
      }
      const round = (members: ReadonlyArray<[keyof typeof texts, number]>) =>
        Effect.all(
          members.map(([text, a], i) => Effect.exit(group.send(texts[text](a, `cell${i}`), `cell${i}`))),
          { concurrency: "unbounded" }
        ).pipe(Effect.map((exits) => exits.map(Exit.isSuccess)))
      yield* group.send(texts.A(1, "x"), "x")
      // the first fails (a duplicate): the group is rolled back and B's and C's first parses were skipped
      expect(yield* round([["A", 1], ["B", 10], ["C", 20]])).toEqual([false, true, true])
      // B, now prepared, fails at execution; C and A go on
      expect(yield* round([["B", 1], ["C", 21], ["A", 11]])).toEqual([false, true, true])
      // D is parsed in its group and fails at execution; then used again, alone and in a group
      expect(yield* round([["D", 1], ["A", 12]])).toEqual([false, true])
      expect(yield* round([["D", 30]])).toEqual([true])
      expect(yield* round([["D", 31], ["B", 32], ["C", 33], ["A", 34]])).toEqual([true, true, true, true])
      expect(yield* kept).toEqual([1, 10, 11, 12, 20, 21, 30, 31, 32, 33, 34])
    }))

  it.scoped("a statement whose caller is interrupted before its group is sent is not sent", () =>
    Effect.gen(function*() {
      const { insert, kept } = yield* setup
      const fiber = yield* Effect.fork(insert(1))
      const other = yield* Effect.fork(insert(2))
      yield* Fiber.interrupt(fiber)
      yield* Fiber.join(other)
      expect(yield* kept).toEqual([2])
    }))
})
