/**
 * A 25 MiB file upload and download (issue 17, D13) against a running service, out of process
 * (the service is a child process: scripts/bench/child.ts). Not a test: it prints figures.
 *
 *   npm run bench:files
 *
 * Each figure is the median of 3, next to a baseline measured in the same run: a bare node:http
 * child process that reads a 25 MiB multipart body and throws it away, and serves 25 MiB from a
 * buffer. RSS is the child's VmRSS, sampled every 10 ms; "peak" is over idle.
 */
import { spawn } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"

import { freePort, mib, ms, quantile, rssOf, sampler, startService } from "./child.js"

const SIZE = 25 * 1024 * 1024
const ROUNDS = 3

/** A bare node:http server in a child process: POST reads and discards, GET serves SIZE bytes. */
const BARE = `
const http = require("node:http")
const body = Buffer.alloc(${SIZE}, 1)
http.createServer((req, res) => {
  if (req.method === "POST") {
    req.on("data", () => {})
    req.on("end", () => { res.writeHead(201, { "content-type": "application/json" }); res.end("{}") })
  } else {
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length })
    res.end(body)
  }
}).listen(Number(process.env.PORT), "127.0.0.1", () => console.log("up"))
`

const startBare = async () => {
  const port = await freePort()
  const child = spawn(process.execPath, ["-e", BARE], { env: { ...process.env, PORT: String(port) }, stdio: ["ignore", "pipe", "inherit"] })
  await new Promise((resolve) => child.stdout.once("data", resolve))
  return { pid: child.pid!, base: `http://127.0.0.1:${port}`, stop: () => child.kill("SIGKILL") }
}

const uploadOnce = async (url: string, key: string, bytes: Uint8Array) => {
  const form = new FormData()
  form.append("purpose", "knowledge")
  form.append("file", new Blob([bytes], { type: "application/octet-stream" }), "big.bin")
  const started = performance.now()
  const res = await fetch(url, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "idempotency-key": String(Math.random()) },
    body: form
  })
  const text = await res.text()
  if (res.status !== 201) throw new Error(`upload: ${res.status} ${text}`)
  return { ms: performance.now() - started, body: JSON.parse(text) }
}

const downloadOnce = async (url: string, key: string) => {
  const started = performance.now()
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } })
  const hash = createHash("sha256")
  let bytes = 0
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    hash.update(chunk)
    bytes += chunk.length
  }
  return { ms: performance.now() - started, bytes, sha256: hash.digest("hex"), status: res.status }
}

/** ROUNDS runs of `f` with the RSS of `pid` sampled: median time and peak RSS over idle. */
const measure = async (pid: number, f: () => Promise<{ ms: number }>) => {
  const idle = rssOf(pid)
  const rss = sampler(pid)
  const times: Array<number> = []
  for (let i = 0; i < ROUNDS; i++) times.push((await f()).ms)
  return { ms: quantile(times, 0.5), peak: rss.stop() - idle, idle }
}

const line = (name: string, figure: { ms: number; peak: number }, baseline: { ms: number; peak: number }) =>
  console.log(
    `  ${name}: ${ms(figure.ms)} (baseline ${ms(baseline.ms)}, ${(figure.ms / baseline.ms).toFixed(2)}x); ` +
      `RSS peak +${mib(figure.peak)} (baseline +${mib(baseline.peak)})`
  )

const main = async () => {
  const bytes = randomBytes(SIZE)
  const sha256 = createHash("sha256").update(bytes).digest("hex")
  const bare = await startBare()
  const service = await startService()
  try {
    const { key, P } = await service.sandbox("Bench Files", ["files:read", "files:write"])
    await uploadOnce(`${service.base}${P}/files`, key, randomBytes(1024)) // warm up
    const bareUp = await measure(bare.pid, () => uploadOnce(`${bare.base}/`, key, bytes))
    const bareDown = await measure(bare.pid, () => downloadOnce(`${bare.base}/`, key))
    let fileId = ""
    const up = await measure(service.pid, async () => {
      const r = await uploadOnce(`${service.base}${P}/files`, key, bytes)
      if (r.body.data.sha256 !== sha256) throw new Error("the stored SHA-256 differs")
      fileId = r.body.data.id
      return r
    })
    const down = await measure(service.pid, async () => {
      const r = await downloadOnce(`${service.base}${P}/files/${fileId}/content`, key)
      if (r.status !== 200 || r.bytes !== SIZE || r.sha256 !== sha256) throw new Error(`download: ${r.status} ${r.bytes} bytes`)
      return r
    })
    console.log(`25 MiB file (${SIZE} bytes), median of ${ROUNDS}; service idle RSS ${mib(up.idle)}`)
    line("upload (multipart, stored in Postgres)", up, bareUp)
    line("download (streamed from Postgres)", down, bareDown)
  } finally {
    bare.stop()
    await service.stop()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
