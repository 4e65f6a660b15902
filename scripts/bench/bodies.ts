/**
 * Oversized request bodies against a running service (issue 14, D19), out of process: the service
 * is a child process (`node --import tsx src/main.ts`, embedded Postgres unless DATABASE_URL is
 * set); this script is the load. Not a test: it prints figures.
 *
 *   npm run bench:bodies
 *   BENCH_SERVICE_DIR=/path/to/other/checkout npm run bench:bodies   # the same load on another version
 *
 * 1. Idle baseline: `/healthz` latency (p50/p99/max over 200 sequential requests), RSS.
 * 2. One 50 MB POST (the client sends all of it unless the server closes first): status, size of
 *    the answer, time, RSS peak.
 * 3. 64 concurrent 8 MB POSTs while `/healthz` is probed every 20 ms: statuses, `/healthz`
 *    latency during the burst (p50/p99/max, and p99 as a ratio of the idle p99), RSS peak and growth.
 * RSS is the child's VmRSS from /proc, sampled every 10 ms.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const serviceDir = process.env["BENCH_SERVICE_DIR"] ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const OPERATOR_TOKEN = `op_bench_${Math.random().toString(36).slice(2)}_0123456789`
const MB = 1000 * 1000

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

const rssOf = (pid: number) => {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8")
    return Number(status.match(/VmRSS:\s+(\d+) kB/)?.[1] ?? 0) * 1024
  } catch {
    return 0
  }
}

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN
}
const ms = (n: number) => `${n.toFixed(1)} ms`
const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`

/** Samples the child's RSS every 10 ms until stopped: the peak. */
const sampler = (pid: number) => {
  let peak = rssOf(pid)
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 10)
  return { stop: () => (clearInterval(timer), peak) }
}

/** One POST of `size` bytes on a raw socket; what came back (the server may answer and close early). */
const postBody = (port: number, target: string, key: string, size: number) =>
  new Promise<{ status: number; bytes: number; ms: number }>((resolve) => {
    const started = performance.now()
    const socket = net.connect(port, "127.0.0.1")
    let response = Buffer.alloc(0)
    let done = false
    const finish = () => {
      if (done) return
      done = true
      socket.destroy()
      const status = Number(response.toString("latin1").match(/^HTTP\/1\.1 (\d{3})/)?.[1] ?? 0)
      resolve({ status, bytes: response.length, ms: performance.now() - started })
    }
    socket.on("data", (chunk) => {
      response = Buffer.concat([response, chunk])
      // done once one whole answer has come (the connection may stay open: keep-alive)
      const text = response.toString("latin1")
      const split = text.indexOf("\r\n\r\n")
      const length = Number(text.match(/\r\ncontent-length: (\d+)/i)?.[1] ?? NaN)
      if (split >= 0 && text.length - split - 4 >= length) finish()
    })
    socket.on("error", finish)
    socket.on("close", finish)
    socket.on("connect", async () => {
      socket.write(
        `POST ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\nIdempotency-Key: ${Math.random()}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${size}\r\n\r\n`
      )
      const chunk = Buffer.alloc(64 * 1024, "a")
      for (let sent = 0; sent < size && !done && socket.writable; sent += chunk.length) {
        const piece = sent + chunk.length > size ? chunk.subarray(0, size - sent) : chunk
        if (!socket.write(piece)) await new Promise((r) => socket.once("drain", r))
      }
      setTimeout(finish, 30_000) // whatever happened, give up after 30 s
    })
  })

const healthz = async (base: string) => {
  const started = performance.now()
  const res = await fetch(`${base}/healthz`)
  await res.arrayBuffer()
  return performance.now() - started
}

const json = async (base: string, method: string, target: string, token: string, body?: unknown) => {
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

const main = async () => {
  const port = await freePort()
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "bench-bodies-"))
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: serviceDir,
    env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, OPERATOR_TOKEN, LOG_LEVEL: "Error" },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let output = ""
  child.stdout.on("data", (c) => (output += c))
  child.stderr.on("data", (c) => (output += c))
  const base = `http://127.0.0.1:${port}`
  try {
    for (let i = 0; i < 600; i++) {
      const up = await fetch(`${base}/readyz`).then((r) => r.ok, () => false)
      if (up) break
      if (child.exitCode !== null) throw new Error(`the service exited:\n${output}`)
      await new Promise((r) => setTimeout(r, 100))
    }
    const pid = child.pid!
    console.log(`service: ${serviceDir} (pid ${pid})`)

    const application = await json(base, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
      organization_name: "Bench Bodies",
      contact_email: "ops@bench.test"
    })
    const approved = await json(base, "POST", `/operator/v1/pilot-applications/${application.id}/approve`, OPERATOR_TOKEN)
    const key = await json(base, "POST", `/operator/v1/tenants/${approved.tenant_id}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
      name: "bench",
      scopes: ["users:write"]
    })
    const target = `/v1/tenants/${approved.tenant_id}/environments/sandbox/users`

    // 1. idle
    for (let i = 0; i < 20; i++) await healthz(base)
    const idle: Array<number> = []
    for (let i = 0; i < 200; i++) idle.push(await healthz(base))
    const rssIdle = rssOf(pid)
    console.log(
      `idle: /healthz p50 ${ms(quantile(idle, 0.5))} p99 ${ms(quantile(idle, 0.99))} max ${ms(Math.max(...idle))}; RSS ${mib(rssIdle)}`
    )

    // 2. one 50 MB body
    const one = sampler(pid)
    const big = await postBody(port, target, key.secret, 50 * MB)
    const peakOne = one.stop()
    console.log(
      `50 MB body: status ${big.status}, answer ${big.bytes} bytes, ${ms(big.ms)}; RSS peak ${mib(peakOne)} (+${mib(peakOne - rssIdle)})`
    )

    // 3. 64 × 8 MB at once, /healthz probed meanwhile
    const burst = sampler(pid)
    const probes: Array<number> = []
    let probing = true
    const prober = (async () => {
      while (probing) {
        probes.push(await healthz(base))
        await new Promise((r) => setTimeout(r, 20))
      }
    })()
    const started = performance.now()
    const results = await Promise.all(Array.from({ length: 64 }, () => postBody(port, target, key.secret, 8 * MB)))
    const took = performance.now() - started
    probing = false
    await prober
    const peakBurst = burst.stop()
    const statuses = new Map<number, number>()
    for (const r of results) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1)
    console.log(
      `64 × 8 MB bodies: ${[...statuses].map(([s, n]) => `${n}× ${s}`).join(", ")} in ${ms(took)}; largest answer ${
        Math.max(...results.map((r) => r.bytes))
      } bytes`
    )
    console.log(
      `  /healthz during the burst (${probes.length} probes): p50 ${ms(quantile(probes, 0.5))} p99 ${ms(quantile(probes, 0.99))} max ${
        ms(Math.max(...probes))
      }; p99 ${(quantile(probes, 0.99) / quantile(idle, 0.99)).toFixed(1)}× idle`
    )
    console.log(`  RSS peak ${mib(peakBurst)} (+${mib(peakBurst - rssIdle)} over idle); after ${mib(rssOf(pid))}`)
  } finally {
    child.kill("SIGTERM")
    await new Promise((r) => setTimeout(r, 2000))
    if (child.exitCode === null) child.kill("SIGKILL")
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
