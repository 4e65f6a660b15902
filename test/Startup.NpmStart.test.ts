/**
 * Starting the service for real: `npm start` (its `prestart` compiles with tsc, then `node dist/main.js`)
 * with its embedded Postgres,
 * the operator token generated once (or from OPERATOR_TOKEN), persistence across starts, a clean
 * SIGTERM shutdown that lets an in-flight request finish, and a non-zero exit when Postgres dies.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { isRunning } from "./support/Processes.js"
import { canConnect, freePort } from "./support/Server.js"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const isRoot = process.getuid?.() === 0

const LISTEN_TIMEOUT = 90_000
const EXIT_TIMEOUT = 30_000

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const waitFor = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs: number, detail = () => "") => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail()}`)
    await sleep(50)
  }
}

const parentOf = (pid: number) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
}

const cmdline = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ")
  } catch {
    return ""
  }
}

/** Live processes whose command line mentions `text` (e.g. `postgres -D <dir>`). */
const processesMentioning = (text: string) =>
  fs.readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) =>
    pid !== process.pid && cmdline(pid).includes(text) && isRunning(pid)
  )

/** The processes below `pid` (the postmaster's backends, say). */
const descendants = (pid: number): Array<number> =>
  fs.readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((p) => {
    try {
      return parentOf(p) === pid
    } catch {
      return false // gone meanwhile
    }
  }).flatMap((child) => [child, ...descendants(child)])

const postmasterPid = (dataDir: string) =>
  Number.parseInt(fs.readFileSync(path.join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10)

interface Running {
  readonly child: ChildProcess
  readonly port: number
  readonly baseUrl: string
  readonly output: () => string
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  readonly hasExited: () => boolean
}

/**
 * Process groups started by these tests (each `npm` leads its own); killed after each test, so a
 * failing test leaves no service or Postgres behind, even one orphaned by its `npm`.
 */
const started = new Set<number>()

/**
 * Whether an `npm start` of this file has built `dist/` (its `prestart`): the later starts skip the
 * rebuild (`--ignore-scripts` skips only pre/post scripts; `start` itself runs), 15-20 s each.
 */
let built = false

/** `npm start` with its own process group; resolves once it logs "listening on". */
const startService = async (dataDir: string, env: Record<string, string> = {}): Promise<Running> => {
  const port = await freePort()
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), DATA_DIR: dataDir, ...env }
  delete childEnv.DATABASE_URL // embedded Postgres
  if (env.OPERATOR_TOKEN === undefined) delete childEnv.OPERATOR_TOKEN
  delete childEnv.LOG_LEVEL
  const child = spawn("npm", built ? ["start", "--ignore-scripts"] : ["start"], {
    cwd: repoRoot,
    env: childEnv,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"]
  })
  started.add(child.pid!)
  let output = ""
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")))
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")))
  let done = false
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      done = true
      resolve({ code, signal })
    })
  )
  await waitFor(
    "the service to listen",
    () => {
      if (done) throw new Error(`the service exited before listening:\n${output}`)
      return output.includes("listening on")
    },
    LISTEN_TIMEOUT,
    () => `\n${output}`
  )
  built = true
  return { child, port, baseUrl: `http://127.0.0.1:${port}`, output: () => output, exited, hasExited: () => done }
}

/**
 * The service process itself: the parent of the embedded postmaster. (`npm` and the `sh -c` it
 * runs do not pass SIGTERM on, so a supervisor must signal the service, not the npm wrapper.)
 */
const servicePid = (dataDir: string) => {
  const pid = parentOf(postmasterPid(dataDir))
  // compiled JavaScript, no TypeScript loader (issue 15: production shape)
  expect(cmdline(pid)).toMatch(/^node dist\/main\.js/)
  return pid
}

/**
 * SIGTERM to the service (unless `signalled` says it was already sent: a second SIGTERM is a
 * forced stop); the `npm` wrapper must exit with code 0 within 30 s, with Postgres stopped.
 */
const stopService = async (
  service: Running,
  dataDir: string,
  signalled?: { readonly pid: number; readonly postmaster: number }
) => {
  const pid = signalled?.pid ?? servicePid(dataDir)
  const postmaster = signalled?.postmaster ?? postmasterPid(dataDir)
  if (!signalled) process.kill(pid, "SIGTERM")
  const result = await Promise.race([
    service.exited,
    sleep(EXIT_TIMEOUT).then(() => {
      throw new Error(`the service did not exit within ${EXIT_TIMEOUT} ms:\n${service.output()}`)
    })
  ])
  expect(result, service.output()).toEqual({ code: 0, signal: null })
  // shutdown is logged, and the address file for the CLI goes with the service
  expect(service.output()).toMatch(/Agent Platform shutting down[\s\S]*Agent Platform stopped/)
  expect(fs.existsSync(path.join(dataDir, "service.json"))).toBe(false)
  expect(isRunning(pid)).toBe(false)
  expect(isRunning(postmaster)).toBe(false)
  expect(fs.existsSync(path.join(dataDir, "pg", "postmaster.pid"))).toBe(false)
  expect(processesMentioning(path.join(dataDir, "pg"))).toEqual([])
}

const TOKEN_LINE = /operator token \((generated|file), stored in ([^)]+)\): (op_\S+)/

const http = async (service: Running, method: string, urlPath: string, token?: string, body?: unknown) => {
  const res = await fetch(`${service.baseUrl}${urlPath}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {})
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  const text = await res.text()
  return { status: res.status, text, body: text ? JSON.parse(text) : undefined }
}

/**
 * An HTTP request whose body is sent in two parts over a raw socket: the server has the request
 * (headers and half the body) in hand until `finish` sends the rest.
 */
const partialRequest = async (port: number, method: string, urlPath: string, token: string, body: unknown) => {
  const socket = net.connect({ host: "127.0.0.1", port })
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve)
    socket.once("error", reject)
  })
  let received = ""
  socket.on("data", (chunk: Buffer) => (received += chunk.toString("utf8")))
  const ended = new Promise<void>((resolve) => socket.once("close", () => resolve()))
  socket.on("error", () => undefined)
  const bytes = Buffer.from(JSON.stringify(body))
  const half = Math.floor(bytes.length / 2)
  socket.write(
    `${method} ${urlPath} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${bytes.length}\r\nConnection: close\r\n\r\n`
  )
  socket.write(bytes.subarray(0, half))
  return {
    received: () => received,
    finish: async () => {
      socket.write(bytes.subarray(half))
      await Promise.race([ended, sleep(EXIT_TIMEOUT)])
      const status = Number(received.match(/^HTTP\/1\.1 (\d{3})/)?.[1])
      const json = received.slice(received.indexOf("{"), received.lastIndexOf("}") + 1)
      return { status, raw: received, body: json ? JSON.parse(json) : undefined }
    }
  }
}

describe("npm start (node dist/main.js, embedded Postgres)", () => {
  let dataDir = ""
  let tokenFile = ""
  beforeAll(() => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-start-"))
    fs.chmodSync(dataDir, 0o755) // the postgres user must reach DATA_DIR/pg when running as root
    tokenFile = path.join(dataDir, "operator-token")
  })
  const state: { token?: string; pilotId?: string; inFlightPilotId?: string; tokenStat?: fs.Stats } = {}

  const cleanup = async () => {
    for (const group of started) {
      try {
        process.kill(-group, "SIGKILL") // the whole group: npm, the service, Postgres
      } catch {
        // gone
      }
    }
    started.clear()
  }

  afterEach(cleanup)
  afterAll(async () => {
    await cleanup()
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true })
  })

  it("first start: initialises Postgres, generates and prints the operator token, serves, exits 0 on SIGTERM", async () => {
    const service = await startService(dataDir)
    const line = service.output().match(TOKEN_LINE)
    expect(line, service.output()).not.toBeNull()
    const [, source, file, token] = line!
    expect(source).toBe("generated")
    expect(path.resolve(file!)).toBe(tokenFile)
    const stat = fs.statSync(tokenFile)
    expect(stat.mode & 0o777).toBe(0o600)
    expect(fs.readFileSync(tokenFile, "utf8").trim()).toBe(token)
    expect(service.output().split(token!).length - 1, service.output()).toBe(1) // printed once, never logged
    state.token = token!
    state.tokenStat = stat

    expect((await http(service, "GET", "/healthz")).status).toBe(200)
    expect((await http(service, "GET", "/readyz")).status).toBe(200)
    expect((await http(service, "GET", "/operator/v1/pilot-applications/pilot_x", "op_wrong")).status).toBe(401)
    // where a second terminal (the operator CLI, npm run quickstart) finds it without PORT
    const serviceFile = JSON.parse(fs.readFileSync(path.join(dataDir, "service.json"), "utf8"))
    expect(serviceFile).toMatchObject({ url: service.baseUrl, pid: servicePid(dataDir) })

    const created = await http(service, "POST", "/operator/v1/pilot-applications", token, {
      organization_name: "Persisted Org",
      contact_email: "ops@persisted.test"
    })
    expect(created.status, created.text).toBe(201)
    state.pilotId = created.body.id

    await stopService(service, dataDir)
  }, 150_000)

  it("second start on the same DATA_DIR: same token, data persists; SIGTERM lets an in-flight request finish", async () => {
    expect(state.token).toBeDefined()
    const service = await startService(dataDir)
    // read from the file: only its source is logged, never its value (D19)
    expect(service.output()).not.toContain(state.token)
    expect(service.output()).toContain("operator token: from DATA_DIR/operator-token")
    const stat = fs.statSync(tokenFile)
    expect(fs.readFileSync(tokenFile, "utf8").trim()).toBe(state.token)
    expect(stat.mode & 0o777).toBe(0o600)
    expect(stat.mtimeMs).toBe(state.tokenStat!.mtimeMs)
    expect(stat.ino).toBe(state.tokenStat!.ino)

    const fetched = await http(service, "GET", `/operator/v1/pilot-applications/${state.pilotId}`, state.token)
    expect(fetched.status, fetched.text).toBe(200)
    expect(fetched.body).toMatchObject({ id: state.pilotId, organization_name: "Persisted Org", status: "submitted" })

    // A request in flight (half its body sent) when SIGTERM arrives.
    const pid = servicePid(dataDir)
    const postmaster = postmasterPid(dataDir)
    const inFlight = await partialRequest(service.port, "POST", "/operator/v1/pilot-applications", state.token!, {
      organization_name: "In-flight Org",
      contact_email: "ops@inflight.test"
    })
    await sleep(300) // the server has parsed the headers and is waiting for the body
    // A round trip on another connection: the event loop has handled the earlier connection too.
    expect((await fetch(`http://127.0.0.1:${service.port}/healthz`)).status).toBe(200)
    process.kill(pid, "SIGTERM")
    // Shutdown is under way once the listener is closed; the process must still be running.
    await waitFor("the listener to close", async () => !(await canConnect(service.port)), 10_000, service.output)
    expect(service.hasExited()).toBe(false)
    expect(isRunning(pid)).toBe(true)
    expect(inFlight.received()).toBe("")

    const reply = await inFlight.finish()
    expect(reply.status, reply.raw).toBe(201)
    expect(reply.body).toMatchObject({ organization_name: "In-flight Org", status: "submitted" })
    state.inFlightPilotId = reply.body.id

    await stopService(service, dataDir, { pid, postmaster })
  }, 150_000)

  it("OPERATOR_TOKEN from the environment is used instead of the stored token", async () => {
    expect(state.inFlightPilotId).toBeDefined()
    const envToken = `op_from_env_${randomBytes(24).toString("base64url")}` // a literal would be published (D20)
    const service = await startService(dataDir, { OPERATOR_TOKEN: envToken })
    expect(service.output()).toContain("operator token: from OPERATOR_TOKEN")
    expect(service.output()).not.toContain(envToken)
    expect(service.output()).not.toContain(state.token)
    expect(fs.readFileSync(tokenFile, "utf8").trim()).toBe(state.token) // left alone

    // The request that was in flight at the last SIGTERM was committed.
    const fetched = await http(service, "GET", `/operator/v1/pilot-applications/${state.inFlightPilotId}`, envToken)
    expect(fetched.status, fetched.text).toBe(200)
    expect(fetched.body.organization_name).toBe("In-flight Org")
    const withFileToken = await http(service, "GET", `/operator/v1/pilot-applications/${state.pilotId}`, state.token)
    expect(withFileToken.status).toBe(401)

    await stopService(service, dataDir)
  }, 150_000)

  it("a database that stops answering does not hold a stop: SIGTERM exits 1 within SHUTDOWN_TIMEOUT_SECONDS", async () => {
    const service = await startService(dataDir, { SHUTDOWN_TIMEOUT_SECONDS: "3", HTTP_DRAIN_SECONDS: "0" })
    const pid = servicePid(dataDir)
    const postmaster = postmasterPid(dataDir)
    // every process of the database stopped: its sockets stay open, nothing answers (a frozen host)
    const frozen = [postmaster, ...descendants(postmaster)]
    try {
      for (const p of frozen) process.kill(p, "SIGSTOP")
      // a request that waits for the database, in flight when the stop begins
      const inFlight = http(service, "GET", `/operator/v1/pilot-applications/${state.pilotId}`, state.token).catch((e) => e)
      await sleep(500)
      const signalled = Date.now()
      process.kill(pid, "SIGTERM")
      const result = await Promise.race([
        service.exited,
        sleep(EXIT_TIMEOUT).then(() => {
          throw new Error(`the service did not exit within ${EXIT_TIMEOUT} ms:\n${service.output()}`)
        })
      ])
      const took = Date.now() - signalled
      expect(result.code, service.output()).toBe(1)
      expect(service.output()).toContain("stopping took longer than 3 s after SIGTERM (SHUTDOWN_TIMEOUT_SECONDS): exiting now")
      expect(took, service.output()).toBeGreaterThanOrEqual(2900)
      expect(took, service.output()).toBeLessThan(8000)
      expect(isRunning(pid)).toBe(false)
      await inFlight
    } finally {
      for (const p of frozen) {
        try {
          process.kill(p, "SIGCONT")
        } catch {
          // gone
        }
      }
    }
    // the database the service left behind goes with the test's cleanup (its process group)
  }, 150_000)

  it("the embedded Postgres dying under the service stops the service with a non-zero exit (a supervisor restarts both)", async () => {
    expect(state.inFlightPilotId).toBeDefined()
    const service = await startService(dataDir)
    const pid = servicePid(dataDir)
    process.kill(postmasterPid(dataDir), "SIGKILL")
    const result = await Promise.race([
      service.exited,
      sleep(EXIT_TIMEOUT).then(() => {
        throw new Error(`the service did not exit within ${EXIT_TIMEOUT} ms:\n${service.output()}`)
      })
    ])
    expect(result.code, service.output()).toBe(1)
    expect(service.output()).toContain("the embedded Postgres exited (signal SIGKILL)")
    expect(isRunning(pid)).toBe(false)

    // the next start recovers the cluster (the killed postmaster left its pid file) with the data
    const again = await startService(dataDir)
    const fetched = await http(again, "GET", `/operator/v1/pilot-applications/${state.pilotId}`, state.token)
    expect(fetched.status, fetched.text).toBe(200)
    await stopService(again, dataDir)
  }, 150_000)

  it.skipIf(!isRoot)("as root, the embedded Postgres data dir is owned by the postgres user (0700)", () => {
    const pgDir = path.join(dataDir, "pg")
    expect(fs.existsSync(path.join(pgDir, "PG_VERSION"))).toBe(true)
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim())
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim())
    const stat = fs.statSync(pgDir)
    expect(stat.uid).toBe(uid)
    expect(stat.gid).toBe(gid)
    expect(stat.mode & 0o777).toBe(0o700)
    // Everything inside too (e.g. its config files).
    for (const name of ["PG_VERSION", "postgresql.conf", "base"]) {
      expect(fs.statSync(path.join(pgDir, name)).uid).toBe(uid)
    }
    // The operator token stays root's, unreadable to others.
    expect(fs.statSync(tokenFile).uid).toBe(0)
    expect(fs.statSync(tokenFile).mode & 0o077).toBe(0)
  })
})
