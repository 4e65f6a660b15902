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
import * as net from "node:net"

import { mib, ms, quantile, rssOf, sampler, startService } from "./child.js"

const MB = 1000 * 1000

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

const main = async () => {
  const service = await startService()
  const { base, pid, port } = service
  try {
    console.log(`service (pid ${pid})`)
    const sandbox = await service.sandbox("Bench Bodies", ["users:write"])
    const key = { secret: sandbox.key }
    const target = `${sandbox.P}/users`

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
    await service.stop()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
