/**
 * The suite's Postgres for tests that need a database of their own: statements as its superuser,
 * fresh databases dropped with their scope, and the `pg` driver. Loads nothing of the platform, so
 * suites of code that stands alone (the tool server SDK) use it too.
 */
import { SqlClient } from "@effect/sql"
import { PgClient as EffectPgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { createRequire } from "node:module"
import { inject } from "vitest"

import { killAllChildren } from "./Server.js"

// `pg` ships no type declarations: the slice used here.
interface PgClient {
  connect(): Promise<void>
  query(text: string): Promise<{ rows: Array<Record<string, unknown>> }>
  end(): Promise<void>
}
/** The `pg` driver, for a plain connection of a test's own. */
export const pg = createRequire(import.meta.url)("pg") as { Client: new(c: { connectionString: string }) => PgClient }

/** A statement on the suite's Postgres as its superuser (databases are created and dropped with it). */
export const admin = async <A>(f: (c: PgClient) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: inject("databaseUrl") })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

/** A fresh, empty database; dropped when the scope closes. */
export const freshDatabase = Effect.acquireRelease(
  Effect.promise(async () => {
    const name = `t_${randomBytes(6).toString("hex")}`
    await admin((c) => c.query(`CREATE DATABASE ${name}`))
    const url = new URL(inject("databaseUrl"))
    url.pathname = `/${name}`
    return { name, url: url.toString() }
  }),
  ({ name }) => Effect.promise(() => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))).pipe(Effect.ignore)
)

/**
 * A crash round's setup: a fresh database for child processes, a SQL client on it (2 connections)
 * to check what they committed, and every child killed when the scope closes.
 */
export const childDatabase = Effect.gen(function*() {
  const db = yield* freshDatabase
  yield* Effect.addFinalizer(() => Effect.promise(killAllChildren))
  const sql = Context.get(
    yield* Layer.build(EffectPgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }).pipe(Layer.orDie)),
    SqlClient.SqlClient
  )
  return { db, sql }
})

interface CountedPool {
  on(event: "connect", listener: (client: { connection: { on(e: string, f: () => void): void } }) => void): void
  end(): Promise<void>
  readonly totalCount: number
  readonly idleCount: number
  readonly waitingCount: number
}
/** `pg`'s pool (the slice used here). */
export const { Pool } = createRequire(import.meta.url)("pg") as { Pool: new(c: { connectionString: string; max: number }) => CountedPool }

/**
 * A fresh database and @effect/sql on one `pg` pool connection, configured as the service's
 * (`configure`, src/Database/Client.ts's `configureConnections`), counting its round trips (each
 * ends in a ReadyForQuery); the pool itself too, for what takes one.
 */
export const countedConnection = (configure: (pool: any) => void) =>
  Effect.gen(function*() {
    const db = yield* freshDatabase
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => new Pool({ connectionString: db.url, max: 1 })),
      (pool) => Effect.promise(() => pool.end())
    )
    const trips = { count: 0 }
    configure(pool)
    pool.on("connect", (client) => client.connection.on("readyForQuery", () => void trips.count++))
    const context = yield* Layer.build(EffectPgClient.layerFromPool({ acquire: Effect.succeed(pool as any) }))
    return { db, pool: pool as unknown, sql: Context.get(context, SqlClient.SqlClient), trips }
  })
