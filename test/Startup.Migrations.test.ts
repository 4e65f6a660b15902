/**
 * Migrations racing between two processes: both succeed on one fresh database, each migration
 * runs once, and a later start has nothing to do. A migration that counts what exists (0023,
 * memory values into `storage_bytes`) counts what was stored before it.
 */
import { Migrator, SqlClient } from "@effect/sql"
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

  it.live("0023 counts the memory values stored before it into storage_bytes (D20)", () =>
    Effect.scoped(Effect.gen(function*() {
      const db = yield* freshDatabase
      const client = yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }))
      const all = yield* Migrations.loader
      const upTo = (last: number) => Migrator.make({})({ loader: Effect.succeed(all.filter(([id]) => id <= last)) })
      yield* Effect.provide(upTo(22), client)
      const sql = yield* Effect.provide(SqlClient.SqlClient, client)
      const values = ["\"éé\"", "{\"a\": [1, 2]}"]
      yield* Effect.orDie(sql`
        WITH t AS (INSERT INTO tenants (id, name, status, created_at, updated_at) VALUES ('ten_m', 'M', 'active', now(), now())),
             e AS (INSERT INTO environments (tenant_id, name, id, state, created_at, updated_at)
                   VALUES ('ten_m', 'sandbox', 'env_m', 'ready', now(), now()))
        SELECT 1`)
      yield* Effect.orDie(sql`INSERT INTO workspaces (id, tenant_id, environment, name, created_at, updated_at)
                               VALUES ('ws_m', 'ten_m', 'sandbox', 'W', now(), now())`)
      yield* Effect.orDie(sql`INSERT INTO quota_usage (tenant_id, environment, storage_bytes) VALUES ('ten_m', 'sandbox', 1000)`)
      for (const [i, value] of values.entries()) {
        yield* Effect.orDie(sql`
          INSERT INTO workspace_memory (tenant_id, environment, workspace_id, key, value, version, updated_at, updated_by_type, updated_by_id)
          VALUES ('ten_m', 'sandbox', 'ws_m', ${`k${i}`}, ${value}::json, 1, now(), 'api_key', 'key_m')`)
      }
      yield* Effect.provide(upTo(23), client)
      const [usage] = yield* Effect.orDie(sql<{ storage_bytes: string }>`SELECT storage_bytes FROM quota_usage WHERE tenant_id = 'ten_m'`)
      // the files' 1000 bytes, and each value's UTF-8 bytes as stored
      expect(Number(usage!.storage_bytes)).toBe(1000 + values.reduce((n, v) => n + Buffer.byteLength(v), 0))
    })), 60_000)
})
