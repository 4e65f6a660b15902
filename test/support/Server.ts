/**
 * The service as a real child process (`node --import tsx src/main.ts`), for kill -9 and SIGSTOP tests.
 *
 * Each child leads its own process group (tsx runs in-process, so the group is the service
 * itself); `kill9` sends SIGKILL to the whole group. Every child started here is remembered until
 * it is killed, so a test's afterEach (`killAllChildren`) leaves nothing running even when the test
 * failed half-way. The child uses DATABASE_URL (no embedded Postgres), so it works as root too.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

const LISTEN_TIMEOUT = 60_000

/** A free loopback port (released again before the service binds it). */
export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** Whether something accepts connections on the loopback `port`. */
export const canConnect = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port })
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

export interface ChildServer {
  readonly baseUrl: string
  /** its DATA_DIR (operator-token, service.json) */
  readonly dataDir: string
  readonly pid: number
  readonly child: ChildProcess
  readonly output: () => string
  /** SIGKILL to the whole process group: no cleanup, no graceful anything. Idempotent. */
  readonly kill9: () => Promise<void>
  /** Sends `signal` to the whole process group (SIGSTOP and SIGCONT: a hung node, issue 41). */
  readonly signal: (signal: NodeJS.Signals) => void
}

const alive = new Set<ChildServer>()

/** Kills every child started by `startChild` and not killed yet (for afterEach / finalizers). */
export const killAllChildren = async () => {
  const all = [...alive]
  alive.clear()
  await Promise.all(all.map((s) => s.kill9()))
}

/**
 * Starts the service on `databaseUrl` (HOST 127.0.0.1, a free PORT, a fresh DATA_DIR) in its own
 * process group; resolves once it logs "listening on". `env` adds to or overrides the environment.
 */
export const startChild = async (databaseUrl: string, env: Record<string, string> = {}): Promise<ChildServer> => {
  // not the runner port a caller chose (also free, and not bound yet: the OS may hand it out again)
  let port = await freePort()
  while (String(port) === env["RUNNER_PORT"]) port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-child-"))
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: repoRoot,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      HOST: "127.0.0.1",
      DATA_DIR: dataDir,
      LOG_LEVEL: "Info",
      ...env
    },
    detached: true, // its own process group
    stdio: ["ignore", "pipe", "pipe"]
  })
  let output = ""
  child.stdout!.on("data", (c: Buffer) => (output += c.toString("utf8")))
  child.stderr!.on("data", (c: Buffer) => (output += c.toString("utf8")))
  let exitedFlag = false
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      exitedFlag = true
      resolve()
    })
    child.once("error", (e) => {
      output += `\nspawn error: ${String(e)}`
      exitedFlag = true
      resolve()
    })
  })
  let killed: Promise<void> | undefined
  const kill9 = () => (killed ??= (async () => {
    alive.delete(server)
    if (child.pid !== undefined) {
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {
        // already gone
      }
    }
    await exited
    fs.rmSync(dataDir, { recursive: true, force: true })
  })())
  const signal = (name: NodeJS.Signals) => {
    if (child.pid !== undefined) process.kill(-child.pid, name)
  }
  const server: ChildServer = {
    baseUrl: `http://127.0.0.1:${port}`,
    dataDir,
    pid: child.pid ?? -1,
    child,
    output: () => output,
    kill9,
    signal
  }
  alive.add(server)

  const deadline = Date.now() + LISTEN_TIMEOUT
  while (!output.includes("listening on")) {
    if (exitedFlag) {
      await kill9()
      throw new Error(`the service exited before listening:\n${output}`)
    }
    if (Date.now() > deadline) {
      await kill9()
      throw new Error(`the service did not listen within ${LISTEN_TIMEOUT} ms:\n${output}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return server
}

/**
 * A request to a child service with a bearer token (a fresh Idempotency-Key on each /v1 mutation):
 * its status, parsed JSON body (if any) and text.
 */
export const callChild = (base: string, method: string, path: string, token: string, body?: unknown) =>
  Effect.promise(async () => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(method !== "GET" && path.startsWith("/v1/") ? { "idempotency-key": randomUUID() } : {})
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    const text = await res.text()
    let json: any = undefined
    try {
      json = text === "" ? undefined : JSON.parse(text)
    } catch {
      // not JSON
    }
    return { status: res.status, json, text }
  })
