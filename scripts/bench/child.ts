/**
 * The service as a child process for out-of-process benchmarks (`node --import tsx src/main.ts`,
 * embedded Postgres unless DATABASE_URL is set), with what they measure it by: its RSS (VmRSS
 * from /proc) and a sampler of its peak, and JSON calls with a key.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const serviceDir = process.env["BENCH_SERVICE_DIR"] ??
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
// random and at least 32 characters: the service refuses a short or published token (D20)
export const OPERATOR_TOKEN = `op_bench_${randomBytes(24).toString("base64url")}`

export const freePort = () =>
  new Promise<number>((resolve) => {
    const server = net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

export const rssOf = (pid: number) => {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    return Number(status.match(/VmRSS:\s+(\d+) kB/)?.[1] ?? 0) * 1024
  } catch {
    return 0
  }
}

export const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN
}
export const ms = (n: number) => `${n.toFixed(1)} ms`
export const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`

/** Samples the child's RSS every 10 ms until stopped: the peak. */
export const sampler = (pid: number) => {
  let peak = rssOf(pid)
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 10)
  return { stop: () => (clearInterval(timer), peak) }
}

export const json = async (base: string, method: string, target: string, token: string, body?: unknown) => {
  const res = await fetch(`${base}${target}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...(target.startsWith("/v1/") ? { "idempotency-key": String(Math.random()) } : {})
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  if (res.status >= 300) throw new Error(`${method} ${target}: ${res.status} ${await res.text()}`)
  return res.json() as Promise<any>
}

export interface Service {
  readonly child: ChildProcess
  readonly pid: number
  readonly port: number
  readonly base: string
  /** A new sandbox tenant and a key of `scopes` in it: the key's secret and the sandbox's path. */
  readonly sandbox: (name: string, scopes: ReadonlyArray<string>) => Promise<{ key: string; P: string }>
  readonly stop: () => Promise<void>
}

/**
 * What runs the service: `BENCH_SERVICE_ENTRY=dist` the compiled build (`npm start`'s `dist/main.js`,
 * built beforehand), else the sources through tsx (`npm run dev`).
 */
const entry = () => (process.env["BENCH_SERVICE_ENTRY"] === "dist" ? ["dist/main.js"] : ["--import", "tsx", "src/main.ts"])

/** Starts the service on a free port and waits until it is ready. */
export const startService = async (env: Record<string, string> = {}): Promise<Service> => {
  const port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-service-"))
  const child = spawn(process.execPath, [...(process.env["BENCH_SERVICE_NODE_ARGS"]?.split(" ").filter(Boolean) ?? []), ...entry()], {
    cwd: serviceDir,
    env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, OPERATOR_TOKEN, LOG_LEVEL: "Error", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let output = ""
  child.stdout.on("data", (c) => (output += c))
  child.stderr.on("data", (c) => (output += c))
  const base = `http://127.0.0.1:${port}`
  const stop = async () => {
    child.kill("SIGTERM")
    for (let i = 0; i < 100 && child.exitCode === null && child.signalCode === null; i++) await new Promise((r) => setTimeout(r, 100))
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
  for (let i = 0; i < 600; i++) {
    // With a timeout: a connection accepted while the service is still starting can go unanswered.
    const up = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false)
    if (up) break
    if (child.exitCode !== null) {
      await stop()
      throw new Error(`the service exited:\n${output}`)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  const sandbox = async (name: string, scopes: ReadonlyArray<string>) => {
    const application = await json(base, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
      organization_name: name,
      contact_email: "ops@bench.test"
    })
    const approved = await json(base, "POST", `/operator/v1/pilot-applications/${application.id}/approve`, OPERATOR_TOKEN)
    const key = await json(base, "POST", `/operator/v1/tenants/${approved.tenant_id}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
      name: "bench",
      scopes
    })
    return { key: key.secret as string, P: `/v1/tenants/${approved.tenant_id}/environments/sandbox` }
  }
  return { child, pid: child.pid!, port, base, sandbox, stop }
}
