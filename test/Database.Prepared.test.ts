/**
 * Prepared statements per connection (src/Database/Prepared.ts), on a real Postgres: which
 * statements a connection prepares, that a migration adding a column leaves its statements
 * working, and the bound on how many it keeps.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

import { preparable, prepareStatements, statementNames } from "../src/Database/Prepared.js"
import { freshDatabase, pg } from "./support/Database.js"

interface Client {
  connect(): Promise<void>
  query(text: string, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<Record<string, unknown>> }>
  end(): Promise<void>
}

const connected = (url: string, limit: number) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: url }) as unknown as Client
      await client.connect()
      prepareStatements(client as any, statementNames(limit))
      return client
    }),
    (client) => Effect.promise(() => client.end())
  )

const preparedOf = (client: Client) =>
  Effect.promise(async () =>
    (await client.query(`SELECT statement FROM pg_prepared_statements WHERE from_sql = false ORDER BY prepare_time`)).rows
      .map((r) => r.statement as string)
  )

describe("prepared statements", () => {
  it("a `*` expansion is never prepared; other statements are", () => {
    expect(preparable("SELECT * FROM runs WHERE id = $1")).toBe(false)
    expect(preparable("SELECT r.*, (SELECT 1) AS x FROM runs r WHERE r.id = $1")).toBe(false)
    expect(preparable("UPDATE runs SET status = $1 RETURNING *")).toBe(false)
    expect(preparable("SELECT count(*) AS n FROM runs WHERE id = $1")).toBe(true)
    expect(preparable("SELECT id, status FROM runs WHERE id = $1")).toBe(true)
  })

  it.scoped("a parameterised statement is prepared once per connection and answers as before", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = yield* connected(db.url, 10)
      for (const n of [1, 2, 3]) {
        const { rows } = yield* Effect.promise(() => client.query(`SELECT $1::int + 1 AS n`, [n]))
        expect(rows).toEqual([{ n: n + 1 }])
      }
      expect(yield* preparedOf(client)).toEqual([`SELECT $1::int + 1 AS n`])
      // Without parameters: the simple protocol, several statements at once, nothing prepared.
      yield* Effect.promise(() => client.query(`CREATE TABLE t (a int); INSERT INTO t VALUES (1)`))
      expect((yield* Effect.promise(() => client.query(`SELECT a FROM t WHERE a = $1`, [1]))).rows).toEqual([{ a: 1 }])
      expect(yield* preparedOf(client)).toEqual([`SELECT $1::int + 1 AS n`, `SELECT a FROM t WHERE a = $1`])
    }))

  it.scoped("a column added by a migration: the connection's statements go on working", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = yield* connected(db.url, 10)
      yield* Effect.promise(() => client.query(`CREATE TABLE t (a int); INSERT INTO t VALUES (1)`))
      const star = `SELECT * FROM t WHERE a = $1`
      const named = `SELECT a FROM t WHERE a = $1`
      for (const text of [star, named]) yield* Effect.promise(() => client.query(text, [1]))
      // What a prepared `SELECT *` would do (why it is not prepared): Postgres refuses it.
      yield* Effect.promise(() => client.query({ name: "by_hand", text: star, values: [1] } as any))

      yield* Effect.promise(() => client.query(`ALTER TABLE t ADD COLUMN b int NOT NULL DEFAULT 2`))

      expect((yield* Effect.promise(() => client.query(star, [1]))).rows).toEqual([{ a: 1, b: 2 }])
      expect((yield* Effect.promise(() => client.query(named, [1]))).rows).toEqual([{ a: 1 }])
      const refused = yield* Effect.promise(() =>
        client.query({ name: "by_hand", text: star, values: [1] } as any).then(() => "answered", (e) => String(e.message))
      )
      expect(refused).toMatch(/cached plan must not change result type/)
    }))

  it.scoped("a connection keeps at most `limit` statements prepared; the rest run unnamed", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = yield* connected(db.url, 2)
      for (const k of [1, 2, 3, 4]) {
        const { rows } = yield* Effect.promise(() => client.query(`SELECT $1::int + ${k} AS n`, [5]))
        expect(rows).toEqual([{ n: 5 + k }])
      }
      expect(yield* preparedOf(client)).toEqual([`SELECT $1::int + 1 AS n`, `SELECT $1::int + 2 AS n`])
    }))

  it.scoped("no statement is prepared with a limit of 0", () =>
    Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = yield* connected(db.url, 0)
      yield* Effect.promise(() => client.query(`SELECT $1::int AS n`, [1]))
      expect(yield* preparedOf(client)).toEqual([])
    }))
})
