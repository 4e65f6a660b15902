/**
 * In-process benchmarks of the runs issue (not tests; `npm run bench:inprocess`; the issue-20 figures are `npm run bench`, out of process): each figure is printed next to a baseline measured in
 * the same run on the same machine and Postgres, as a ratio, because these machines are noisy.
 *
 *   npm run bench                 # embedded Postgres in a temp dir (or DATABASE_URL)
 *   BENCH_SCALE=0.5 npm run bench # fewer requests/streams/events
 *   BENCH_ONLY=1,3 npm run bench  # some of them
 *
 * 1. Durable run admission over 64 cells vs single-row INSERT transactions (same concurrency).
 * 2. Event commit -> SSE frame latency with 1,000 open streams vs a bare node:http SSE fan-out.
 * 3. A scripted run with `Prefer: wait=10` (p50) vs a bare node:http JSON round trip.
 * 4. An events page read near the end of a 100,000-event run vs a 10-event run.
 * 5. Run admission with quotas on vs off (scripts/bench/quotas.ts).
 *
 * The service runs in this process with the cell rate limit and the stream limits raised (the
 * benchmarks measure the runtime, not the limiter; the limits have their own tests).
 */
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { createServer, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { AppConfig, defaultRunConfig } from "../../src/Config/AppConfig.js"
import { DatabaseLive } from "../../src/Database/Client.js"
import { ServerLive } from "../../src/Edge/Server.js"
import { HttpLive } from "../../src/Http.js"
import { forEachRunEvent } from "../lib/RunEvents.js"
import { quotaAdmission } from "./quotas.js"

const SCALE = Number(process.env.BENCH_SCALE ?? 1)
const OPERATOR = "op_bench_operator_token_0123456789"
const CELLS = 64

// ---- small helpers ---------------------------------------------------------------------------
const percentile = (xs: ReadonlyArray<number>, p: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN
}
const rows: Array<Array<string>> = []
const report = (name: string, figure: number, unit: string, baseline: number, target: string, met: boolean) => {
  rows.push([
    name,
    `${figure.toFixed(2)} ${unit}`,
    `${baseline.toFixed(2)} ${unit}`,
    (figure / baseline).toFixed(2),
    target,
    met ? "yes" : "NO"
  ])
  console.log(`  ${name}: ${figure.toFixed(2)} ${unit} (baseline ${baseline.toFixed(2)}) -> ${met ? "met" : "NOT met"}`)
}

const call = async (base: string, method: string, url: string, token: string, body?: unknown, headers: Record<string, string> = {}) => {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...(method !== "GET" && url.startsWith("/v1/") ? { "idempotency-key": randomUUID() } : {}),
      ...headers
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  const json: any = await res.json().catch(() => undefined)
  if (res.status >= 400) throw new Error(`${method} ${url} -> ${res.status} ${JSON.stringify(json)}`)
  return { status: res.status, json }
}

interface Cell {
  P: string
  key: string
  workspaceId: string
  textRevision: string
  slowRevision: string
}

const provision = async (base: string, i: number): Promise<Cell> => {
  const pilot = await call(base, "POST", "/operator/v1/pilot-applications", OPERATOR, {
    organization_name: `Bench ${i}`,
    contact_email: "b@bench.test"
  })
  const approved = await call(base, "POST", `/operator/v1/pilot-applications/${pilot.json.id}/approve`, OPERATOR)
  const t = approved.json.tenant_id
  const key = await call(base, "POST", `/operator/v1/tenants/${t}/environments/sandbox/api-keys`, OPERATOR, {
    name: "bench",
    scopes: ["agents:read", "agents:write", "conversations:read", "conversations:write", "runs:read", "runs:write"]
  })
  const P = `/v1/tenants/${t}/environments/sandbox`
  const k = key.json.secret
  const ws = await call(base, "POST", `${P}/workspaces`, k, { name: "w" })
  const agent = await call(base, "POST", `${P}/agents`, k, { workspace_id: ws.json.data.id, name: "a" })
  const revision = async (steps: unknown) => {
    const mp = await call(base, "POST", `${P}/model-profiles`, k, { name: "s", provider: "scripted", model: "s", settings: { steps } })
    const rev = await call(base, "POST", `${P}/agents/${agent.json.data.id}/revisions`, k, {
      model_profile_id: mp.json.data.id,
      instructions: "",
      tool_ids: []
    })
    return rev.json.data.id as string
  }
  return {
    P,
    key: k,
    workspaceId: ws.json.data.id,
    textRevision: await revision([{ type: "text", text: "ok {{input}}" }]),
    slowRevision: await revision([{ type: "sleep", seconds: 3 }, { type: "text", text: "late" }])
  }
}

const conversation = async (base: string, c: Cell, revision: string) =>
  (await call(base, "POST", `${c.P}/conversations`, c.key, { workspace_id: c.workspaceId, agent_revision_id: revision })).json.data
    .id as string

const bareServer = (handler: (req: any, res: ServerResponse) => void) =>
  new Promise<{ url: string; close: () => void; server: ReturnType<typeof createServer> }>((resolve) => {
    const server = createServer(handler)
    server.listen(
      0,
      "127.0.0.1",
      () => resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close(), server })
    )
  })

// ---- 1. admission ------------------------------------------------------------------------------
const admission = (base: string, cells: ReadonlyArray<Cell>, sql: SqlClient.SqlClient) =>
  Effect.gen(function*() {
    const perCell = Math.max(5, Math.round(40 * SCALE))
    const convs = yield* Effect.promise(() =>
      Promise.all(cells.map(async (c) => {
        const ids: Array<string> = []
        for (let i = 0; i < perCell; i++) ids.push(await conversation(base, c, c.textRevision))
        return ids
      }))
    )
    const started = performance.now()
    yield* Effect.promise(() =>
      Promise.all(cells.map(async (c, i) => {
        for (const conv of convs[i]!) {
          await call(base, "POST", `${c.P}/conversations/${conv}/runs`, c.key, { input: [{ type: "text", text: "x" }] })
        }
      }))
    )
    const admitted = (cells.length * perCell) / ((performance.now() - started) / 1000)

    yield* Effect.orDie(
      sql`CREATE TABLE IF NOT EXISTS bench_rows (id text PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL)`
    )
    const t0 = performance.now()
    yield* Effect.forEach(
      cells,
      () =>
        Effect.forEach(
          Array.from({ length: perCell }),
          () =>
            sql.withTransaction(
              sql`INSERT INTO bench_rows VALUES (${randomUUID()}, ${
                JSON.stringify({ input: [{ type: "text", text: "x" }] })
              }::jsonb, now())`
            ),
          { discard: true }
        ),
      { concurrency: cells.length, discard: true }
    ).pipe(Effect.orDie)
    const inserted = (cells.length * perCell) / ((performance.now() - t0) / 1000)
    const ratio = admitted / inserted
    report("run admission (64 cells, 64 clients)", admitted, "runs/s", inserted, ">= 0.6x inserts/s", ratio >= 0.6)
  })

// ---- 2. SSE latency ------------------------------------------------------------------------------
const readStream = (url: string, key: string, openedAt: number, samples: Array<number>) =>
  fetch(url, { headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } }).then((res) =>
    forEachRunEvent(res, (event, receivedAt) => {
      const committed = Date.parse(event.created_at)
      if (committed > openedAt) samples.push(receivedAt - committed)
    })
  )

const sseLatency = (base: string, cells: ReadonlyArray<Cell>) =>
  Effect.promise(async () => {
    const streams = Math.round(1000 * SCALE)
    const runsCount = Math.min(cells.length, 50)
    const perRun = Math.ceil(streams / runsCount)
    const samples: Array<number> = []
    const readers: Array<Promise<void>> = []
    for (let i = 0; i < runsCount; i++) {
      const c = cells[i]!
      const conv = await conversation(base, c, c.slowRevision)
      const run = await call(base, "POST", `${c.P}/conversations/${conv}/runs`, c.key, { input: [{ type: "text", text: "x" }] })
      for (let j = 0; j < perRun; j++) {
        readers.push(readStream(`${base}${c.P}/runs/${run.json.data.id}/events/stream`, c.key, Date.now(), samples))
      }
    }
    await Promise.all(readers)
    const p99 = percentile(samples, 99)

    // Baseline: a bare node:http server pushing one frame to as many open SSE connections.
    const clients: Array<ServerResponse> = []
    const bare = await bareServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.write(": open\n\n")
      clients.push(res)
    })
    const baseSamples: Array<number> = []
    const bareReaders = Array.from({ length: runsCount * perRun }, () =>
      (async () => {
        const res = await fetch(bare.url)
        const decoder = new TextDecoder()
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          const text = decoder.decode(chunk)
          const m = text.match(/"created_at":(\d+)/)
          if (m) {
            baseSamples.push(Date.now() - Number(m[1]))
            return
          }
        }
      })())
    while (clients.length < runsCount * perRun) await new Promise((r) => setTimeout(r, 20))
    for (let round = 0; round < 2; round++) {
      const payload = JSON.stringify({ created_at: Date.now(), pad: "x".repeat(300) })
      for (const res of clients) res.write(`event: run.message\ndata: ${payload}\n\n`)
      await new Promise((r) => setTimeout(r, 200))
    }
    await Promise.all(bareReaders)
    for (const res of clients) res.end()
    bare.close()
    console.log(`  SSE: ${samples.length} live frames on ${runsCount * perRun} streams; p50 ${percentile(samples, 50)} ms`)
    report("event commit -> SSE p99 (1,000 streams)", p99, "ms", Math.max(1, percentile(baseSamples, 99)), "p99 <= 25 ms", p99 <= 25)
  })

// ---- 3. Prefer: wait --------------------------------------------------------------------------------
const preferWait = (base: string, c: Cell) =>
  Effect.promise(async () => {
    const n = Math.max(20, Math.round(200 * SCALE))
    const times: Array<number> = []
    let lastRun = ""
    for (let i = 0; i < n; i++) {
      const conv = await conversation(base, c, c.textRevision)
      const t0 = performance.now()
      const res = await call(base, "POST", `${c.P}/conversations/${conv}/runs`, c.key, { input: [{ type: "text", text: "x" }] }, {
        prefer: "wait=10"
      })
      times.push(performance.now() - t0)
      if (res.status !== 200 || res.json.data.status !== "succeeded") throw new Error(`not a terminal 200: ${res.status}`)
      lastRun = res.json.data.id
    }
    const bare = await bareServer((req, res) => {
      let body = ""
      req.on("data", (d: Buffer) => (body += d))
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" })
        res.end(body)
      })
    })
    const baseTimes: Array<number> = []
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      await (await fetch(bare.url, { method: "POST", body: JSON.stringify({ input: [{ type: "text", text: "x" }] }) })).json()
      baseTimes.push(performance.now() - t0)
    }
    bare.close()
    const reads: Array<number> = []
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      await call(base, "GET", `${c.P}/runs/${lastRun}`, c.key)
      reads.push(performance.now() - t0)
    }
    console.log(`  for scale: getRun through the same pipeline (auth, rate limit, one read): p50 ${percentile(reads, 50).toFixed(2)} ms`)
    const p50 = percentile(times, 50)
    report("scripted run, Prefer: wait p50", p50, "ms", percentile(baseTimes, 50), "p50 <= 15 ms", p50 <= 15)
  })

// ---- 4. events page read time -------------------------------------------------------------------
const pageReads = (base: string, c: Cell, sql: SqlClient.SqlClient) =>
  Effect.gen(function*() {
    const big = Math.round(100_000 * SCALE)
    const runOf = (n: number) =>
      Effect.gen(function*() {
        const conv = yield* Effect.promise(() => conversation(base, c, c.textRevision))
        const res = yield* Effect.promise(() =>
          call(base, "POST", `${c.P}/conversations/${conv}/runs`, c.key, { input: [{ type: "text", text: "x" }] }, { prefer: "wait=10" })
        )
        const runId: string = res.json.data.id
        // Pad the finished run's history to n events (sequences 5..n), as a long run would have.
        yield* Effect.orDie(sql`
          INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
          SELECT ${runId}, g, 'evt_bench_' || ${runId} || '_' || g, 'run.message', '{"role":"assistant"}'::jsonb, now()
          FROM generate_series(5, ${n}) g`)
        yield* Effect.orDie(sql`UPDATE runs SET last_sequence = ${Math.max(n, 4)} WHERE id = ${runId}`)
        const [{ id }] = yield* Effect.orDie(sql<{ id: string }>`
          SELECT id FROM run_events WHERE run_id = ${runId} AND sequence = ${Math.max(1, n - 60)}`)
        return { runId, cursor: id }
      })
    const timeReads = (runId: string, cursor: string) =>
      Effect.promise(async () => {
        const times: Array<number> = []
        for (let i = 0; i < 200; i++) {
          const t0 = performance.now()
          const res = await call(base, "GET", `${c.P}/runs/${runId}/events?limit=50&cursor=${cursor}`, c.key)
          times.push(performance.now() - t0)
          if (res.json.items.length !== 50) throw new Error("short page")
        }
        return percentile(times, 50)
      })
    const small = yield* runOf(Math.max(10, 61 + 50))
    const large = yield* runOf(big)
    yield* Effect.orDie(sql`ANALYZE run_events`)
    const smallMs = yield* timeReads(small.runId, small.cursor)
    const largeMs = yield* timeReads(large.runId, large.cursor)
    report(`events page read, ${big.toLocaleString()} vs ~110 events`, largeMs, "ms", smallMs, "<= 1.2x", largeMs / smallMs <= 1.2)
  })

// ---- main ------------------------------------------------------------------------------------------
const program = Effect.gen(function*() {
  const server = yield* HttpServer.HttpServer
  const base = `http://127.0.0.1:${(server.address as HttpServer.TcpAddress).port}`
  const sql = yield* SqlClient.SqlClient
  const t0 = performance.now()
  console.log(`provisioning ${CELLS} sandboxes...`)
  const cells: Array<Cell> = []
  for (let i = 0; i < CELLS; i += 16) {
    cells.push(
      ...(yield* Effect.promise(() => Promise.all(Array.from({ length: Math.min(16, CELLS - i) }, (_, j) => provision(base, i + j)))))
    )
  }
  const only = process.env.BENCH_ONLY?.split(",")
  const want = (n: string) => only === undefined || only.includes(n)
  if (want("1")) {
    console.log("1. admission")
    yield* admission(base, cells, sql)
  }
  if (want("2")) {
    console.log("2. SSE latency")
    yield* sseLatency(base, cells)
  }
  if (want("3")) {
    console.log("3. Prefer: wait")
    yield* preferWait(base, cells[CELLS - 1]!)
  }
  if (want("4")) {
    console.log("4. events page reads")
    yield* pageReads(base, cells[CELLS - 2]!, sql)
  }
  if (want("5")) {
    console.log("5. admission, quotas on vs off")
    const conversations = (count: number) =>
      Effect.promise(() =>
        Promise.all(cells.map(async (c) => {
          const ids: Array<string> = []
          for (let i = 0; i < count; i++) ids.push(await conversation(base, c, c.textRevision))
          return ids
        }))
      )
    yield* quotaAdmission(conversations, Math.max(5, Math.round(40 * SCALE)), report)
  }
  console.log(`\n| benchmark | figure | baseline | ratio | target | met |\n|---|---|---|---|---|---|`)
  for (const r of rows) console.log(`| ${r.join(" | ")} |`)
  console.log(`\ntotal ${((performance.now() - t0) / 1000).toFixed(1)} s (scale ${SCALE})`)
})

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-bench-"))
const settings = AppConfig.defaults({
  databaseUrl: process.env.DATABASE_URL ? Option.some(Redacted.make(process.env.DATABASE_URL)) : Option.none(),
  dataDir,
  operatorToken: Option.some(Redacted.make(OPERATOR)),
  dbPoolSize: 20,
  rateLimit: { ratePerSecond: 100_000, burst: 100_000 },
  runs: { ...defaultRunConfig, streamsPerCell: 100_000, streamsPerActor: 100_000 }
})
const AppLive = HttpLive.pipe(
  Layer.provideMerge(ServerLive),
  Layer.provideMerge(DatabaseLive),
  Layer.provideMerge(Layer.succeed(AppConfig, settings))
)

Effect.runPromise(program.pipe(Effect.provide(AppLive), Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Warning))).then(
  () => fs.rmSync(dataDir, { recursive: true, force: true }),
  (e) => {
    console.error(e)
    process.exitCode = 1
  }
).finally(() => process.exit())
