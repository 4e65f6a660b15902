/**
 * Migrations racing between two processes: both succeed on one fresh database, each migration
 * runs once, and a later start has nothing to do.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as Migrations from "../src/Database/Migrations.js"
import { freshDatabase } from "./support/Database.js"

describe("migrations", () => {
  it.live("two processes migrating one fresh database at once both succeed; each migration runs once", () =>
    Effect.gen(function*() {
      const expected = (yield* Migrations.loader).map(([id, name]) => [id, name] as const)
      expect(expected.length).toBeGreaterThan(0)

      // A few rounds, each on its own fresh database, to give a race a chance to show.
      for (let round = 0; round < 3; round++) {
        yield* Effect.scoped(Effect.gen(function*() {
          const db = yield* freshDatabase
          // Two separate pools, as two processes would have, both connected before the race starts.
          const pool = () => Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 3 }))
          const a = yield* pool()
          const b = yield* pool()

          const [ranA, ranB] = yield* Effect.all(
            [Effect.provide(Migrations.run, a), Effect.provide(Migrations.run, b)],
            { concurrency: "unbounded" }
          )
          // Exactly one of them applied the migrations; the other found nothing left to do.
          expect([...ranA, ...ranB]).toEqual(expected)
          expect(Math.min(ranA.length, ranB.length)).toBe(0)

          const sql = SqlClient.SqlClient
          const rows = yield* Effect.flatMap(
            sql,
            (sql) =>
              sql<{ migration_id: number; name: string; n: number }>`
                SELECT migration_id, name, count(*) OVER (PARTITION BY migration_id)::int AS n
                FROM effect_sql_migrations ORDER BY migration_id`
          ).pipe(Effect.provide(a))
          expect(rows.map((r) => [r.migration_id, r.name] as const)).toEqual(expected)
          expect(rows.every((r) => r.n === 1)).toBe(true)

          // The schema is there, and a later start has nothing to do.
          const envs = yield* Effect.flatMap(sql, (sql) => sql`SELECT count(*)::int AS n FROM environments`).pipe(
            Effect.provide(b)
          )
          expect(envs).toEqual([{ n: 0 }])
          expect(yield* Effect.provide(Migrations.run, a)).toEqual([])
        }))
      }
    }), 60_000)
})
