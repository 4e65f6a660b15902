/** The service as a real child process (`node --import tsx src/main.ts`), for kill -9 tests. */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

export interface ChildServer {
  readonly baseUrl: string
  readonly child: ChildProcess
  readonly output: () => string
  /** SIGKILL to the whole process group: no cleanup, no graceful anything. */
  readonly kill9: () => Promise<void>
}

/** Starts the service on `databaseUrl` in its own process group; resolves once it listens. */
export const startChild = async (databaseUrl: string, env: Record<string, string> = {}): Promise<ChildServer> => {
  const port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-child-"))
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: repoRoot,
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, LOG_LEVEL: "Info", ...env },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"]
  })
  let output = ""
  child.stdout!.on("data", (c: Buffer) => (output += c.toString("utf8")))
  child.stderr!.on("data", (c: Buffer) => (output += c.toString("utf8")))
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  const deadline = Date.now() + 60_000
  while (!output.includes("listening on")) {
    if (child.exitCode !== null) throw new Error(`the service exited before listening:\n${output}`)
    if (Date.now() > deadline) throw new Error(`the service did not listen within 60 s:\n${output}`)
    await new Promise((r) => setTimeout(r, 50))
  }
  const kill9 = async () => {
    try {
      process.kill(-child.pid!, "SIGKILL")
    } catch {
      // already gone
    }
    await exited
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
  return { baseUrl: `http://127.0.0.1:${port}`, child, output: () => output, kill9 }
}
