/**
 * The noisy-neighbour benchmark (issue 36): how much tenant A, flooding within every limit it has,
 * slows tenant B on the same node. Out of process: the service is a child process
 * (scripts/bench/child.ts) on the bench's own Postgres (scripts/bench/pg.ts); B's load and
 * measurements run in this process; A's flood in another (scripts/bench/flood.ts, forked), so that
 * its load generation never shares this event loop. Not a test: it prints figures.
 *
 *   npm run bench:neighbours               # phases of 30 s, on the compiled build (`npm run build` first)
 *   npm run bench:neighbours -- --quick    # phases of 15-20 s, under 2 minutes
 *   BENCH_SERVICE_DIR=/tmp/before BENCH_SERVICE_ENTRY=dist npm run bench:neighbours   # another checkout, built
 *
 * Two sandboxes (two cells) on the one node, each provisioned through the operator API. B, measured
 * here, stays far below its limits: scripted runs (one text step, no tools) end to end at C=1 with
 * `Prefer: wait=10` (a 202 is then polled until the run ended), paced at 10/s; `GET run` from 4
 * clients paced at 10/s each (B's 50 requests/s stay under its 60/s limit); one webhook endpoint,
 * on a receiver here that answers 200 at once, subscribed to `run.succeeded`: each of B's runs is
 * one delivery, whose first attempt's delay is its arrival minus the event's `created_at`. A, at
 * its limits, is described in scripts/bench/flood.ts: 64 active runs calling a customer tool that
 * answers in 2 s, 128 streams, requests at 73/s against its 60/s, 25 MiB uploads and downloads, 16
 * webhook endpoints that never answer, 4 schedules firing every second. The operator raises A's
 * `runs_per_day` and `storage_bytes` quotas (the defaults would stop its runs and uploads) and
 * lowers its `schedule_min_interval_seconds` to 1; the cell rate limit stays the service's default.
 *
 * Phases: warm-up (B), **B alone**, then A's flood starts and ramps up, **B while A floods**; after
 * each, B's webhooks get a grace period to arrive (A still flooding after the second); then A stops.
 * During each measured phase: the service's and Postgres's CPU (utime+stime from /proc, % of a
 * core), this process's, A's process's and the rest of the machine's (/proc/stat), and the pool
 * figures of `GET /metrics` once a second. Printed: the issue's table (B alone, B while A floods,
 * the ratio, the targets met or not) and A's own figures against what its limits allow.
 */
import { execFileSync, fork } from "node:child_process"
import * as fs from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import { setTimeout as sleep } from "node:timers/promises"
import { fileURLToPath } from "node:url"

import { json, OPERATOR_TOKEN, type Service, serviceDir, startService } from "./child.js"
import {
  type FloodConfig,
  type FloodFigures,
  type FromFlood,
  type IdleFigures,
  request,
  retrying,
  summarize,
  type Summary,
  type ToFlood
} from "./flood.js"
import { cpuMs, startPostgres } from "./pg.js"

const quick = process.argv.includes("--quick")
/** seconds */
const PHASES = quick
  ? { warm: 3, alone: 15, ramp: 8, flood: 20, grace: 5 }
  : { warm: 5, alone: 30, ramp: 12, flood: 30, grace: 15 }
const ACTIVE = new Set(["queued", "running", "cancel_requested"])
const B_RUNS_PER_SECOND = 10
const B_GET_CLIENTS = 4
const B_GETS_PER_CLIENT = 10 // per second
const A_KEYS = 8 // 16 streams per key (ACTOR_MAX_STREAMS): 128 over 8
const RATE_LIMIT = 60 // CELL_RATE_LIMIT_RPS, the service's default, left as it is
const WEBHOOK_CELL_CONCURRENCY = 8 // the service's default: attempts of one environment in flight
const WEBHOOK_ATTEMPT_SECONDS = 15 // the service gives up an attempt after this

const FLOOD: Omit<FloodConfig, "base" | "P" | "keys"> = {
  slots: 64, // CELL_MAX_ACTIVE_RUNS
  streamsPerRun: 2, // 128 streams: CELL_MAX_STREAMS
  toolCalls: 4,
  toolSeconds: 2,
  offeredRps: Number(process.env["BENCH_A_OFFERED_RPS"] ?? 73),
  endpoints: 16, // the webhook_endpoints quota
  schedules: 4,
  fileBytes: 25 * 1024 * 1024
}

const B_SCOPES = [
  "agents:read",
  "agents:write",
  "conversations:read",
  "conversations:write",
  "runs:read",
  "runs:write",
  "webhooks:read",
  "webhooks:write"
]
const A_SCOPES = [
  ...B_SCOPES,
  "connections:read",
  "connections:write",
  "files:read",
  "files:write",
  "schedules:read",
  "schedules:write"
]

// ---- what is measured around a phase: CPU, the machine, the pool -------------------------------

/** busy and total jiffies of the whole machine (/proc/stat's first line) */
const machine = () => {
  const [, ...fields] = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/)
  const n = fields.map(Number)
  const total = n.slice(0, 8).reduce((a, b) => a + b, 0)
  return { busy: total - n[3]! - n[4]!, total }
}

interface Cpu {
  readonly service: number
  readonly postgres: number
  readonly bench: number
  readonly flood: number
  /** everything else on the machine: other sessions' work, the kernel's */
  readonly other: number
}

/** Starts counting; the returned function gives each one's CPU since, in % of a core. */
const cpuSince = (service: Service, postgres: () => number, floodPid: number) => {
  const at = performance.now()
  const own = process.cpuUsage()
  const s0 = cpuMs(service.pid)
  const p0 = postgres()
  const f0 = cpuMs(floodPid)
  const m0 = machine()
  return (): Cpu => {
    const wall = performance.now() - at
    const m1 = machine()
    const usage = process.cpuUsage(own)
    const ownMs = (usage.user + usage.system) / 1000
    const cores = os.cpus().length
    const machineMs = ((m1.busy - m0.busy) / Math.max(1, m1.total - m0.total)) * cores * wall
    const service_ = cpuMs(service.pid) - s0
    const postgres_ = postgres() - p0
    const flood = cpuMs(floodPid) - f0
    const pct = (ms: number) => (ms / wall) * 100
    return {
      service: pct(service_),
      postgres: pct(postgres_),
      bench: pct(ownMs),
      flood: pct(flood),
      other: Math.max(0, pct(machineMs - service_ - postgres_ - ownMs - flood))
    }
  }
}

interface Pool {
  readonly inUse: Summary
  readonly waiting: Summary
  readonly max: number
}

/** `GET /metrics` once a second (one at a time) until stopped: the pool's gauges. */
const poolSampler = (service: Service) => {
  const inUse: Array<number> = []
  const waiting: Array<number> = []
  let max = NaN
  let stopped = false
  const gauge = (text: string, pattern: RegExp) => Number(text.match(pattern)?.[1] ?? NaN)
  const done = (async () => {
    while (!stopped) {
      const next = performance.now() + 1000
      const text = await fetch(`${service.base}/metrics`, {
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
        signal: AbortSignal.timeout(10_000)
      }).then((r) => r.text(), () => "")
      const used = gauge(text, /^db_pool_connections\{state="in_use"\} (\S+)$/m)
      if (!Number.isNaN(used)) inUse.push(used)
      const waits = gauge(text, /^db_pool_waiting_requests (\S+)$/m)
      if (!Number.isNaN(waits)) waiting.push(waits)
      max = gauge(text, /^db_pool_max_connections (\S+)$/m)
      await sleep(Math.max(0, next - performance.now()))
    }
  })()
  return async (): Promise<Pool> => {
    stopped = true
    await done
    return { inUse: summarize(inUse), waiting: summarize(waiting), max }
  }
}

// ---- B ------------------------------------------------------------------------------------------

interface B {
  readonly P: string
  readonly key: string
  /** fresh conversations, one per run */
  readonly conversations: Array<string>
  /** a finished run: what `GET run` reads */
  runId: string
}

/** B's run: its end-to-end time, its id, and when its answer came (after its `run.succeeded` commit). */
interface BRun {
  readonly started: number
  readonly ms: number
  readonly ok: boolean
  readonly runId: string | undefined
  readonly answeredAt: number
}

interface BPhase {
  readonly from: number
  readonly seconds: number
  readonly runs: Array<BRun>
  readonly gets: Array<{ readonly ms: number; readonly status: number }>
  /** B's answers other than 2xx: status -> count */
  readonly other: Map<number, number>
}

const provisionB = async (service: Service, runs: number): Promise<B> => {
  const { key, P } = await service.sandbox("Neighbour B", B_SCOPES)
  const post = (path: string, body: unknown) => retrying(() => request(`${service.base}${P}${path}`, "POST", key, body), `POST ${path}`)
  const ws = (await post("/workspaces", { name: "b" })).data.id
  const agent = (await post("/agents", { workspace_id: ws, name: "b" })).data.id
  const profile = await post("/model-profiles", {
    name: "s",
    provider: "scripted",
    model: "s",
    settings: { steps: [{ type: "text", text: "ok {{input}}" }] }
  })
  const rev = (await post(`/agents/${agent}/revisions`, { model_profile_id: profile.data.id, instructions: "", tool_ids: [] })).data.id
  const conversations: Array<string> = []
  // within B's rate limit: 4 at a time, a refusal waits
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (conversations.length < runs) {
      conversations.push((await post("/conversations", { workspace_id: ws, agent_revision_id: rev })).data.id)
    }
  }))
  return { P, key, conversations, runId: "" }
}

/** B's load for `seconds`: runs end to end at C=1 paced at 10/s, `GET run` from 4 clients at 10/s each. */
const loadB = async (service: Service, b: B, seconds: number): Promise<BPhase> => {
  const phase: BPhase = { from: Date.now(), seconds, runs: [], gets: [], other: new Map() }
  const until = performance.now() + seconds * 1000
  const other = (status: number) => phase.other.set(status, (phase.other.get(status) ?? 0) + 1)
  const url = (path: string) => `${service.base}${b.P}${path}`
  const runs = (async () => {
    for (let next = performance.now(); next < until;) {
      await sleep(Math.max(0, next - performance.now()))
      const started = performance.now()
      next = started + 1000 / B_RUNS_PER_SECOND
      const conversation = b.conversations.pop()
      if (conversation === undefined) throw new Error("B ran out of conversations: raise their count")
      const answer = await request(url(`/conversations/${conversation}/runs`), "POST", b.key, { input: [{ type: "text", text: "x" }] }, {
        prefer: "wait=10"
      })
      if (answer.status >= 300) other(answer.status)
      const runId = answer.body?.data?.id as string | undefined
      let status = answer.body?.data?.status as string | undefined
      // 202: the run had not ended within 10 s; it is followed until it has
      while (answer.status === 202 && runId !== undefined && status !== undefined && ACTIVE.has(status)) {
        await sleep(50)
        const polled = await request(url(`/runs/${runId}`), "GET", b.key)
        if (polled.status !== 200) other(polled.status)
        else status = polled.body.data.status
      }
      phase.runs.push({
        started: Date.now() - (performance.now() - started),
        ms: performance.now() - started,
        ok: status === "succeeded",
        runId,
        answeredAt: Date.now()
      })
      if (status === "succeeded" && b.runId === "") b.runId = runId!
    }
  })()
  const gets = Array.from({ length: B_GET_CLIENTS }, async (_, client) => {
    await sleep((client * 1000) / B_GETS_PER_CLIENT / B_GET_CLIENTS)
    // at most 10/s; a slower answer delays the next one (no catching up)
    for (let next = performance.now(); next < until;) {
      await sleep(Math.max(0, next - performance.now()))
      const started = performance.now()
      next = started + 1000 / B_GETS_PER_CLIENT
      if (b.runId === "") continue
      const answer = await request(url(`/runs/${b.runId}`), "GET", b.key)
      if (answer.status !== 200) other(answer.status)
      phase.gets.push({ ms: performance.now() - started, status: answer.status })
    }
  })
  await Promise.all([runs, ...gets])
  return phase
}

/** B's webhook receiver: answers 200 at once; the first arrival of each run's `run.succeeded` and its event's `created_at`. */
const receiver = async () => {
  const arrived = new Map<string, { at: number; created: number }>()
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const at = Date.now()
      res.writeHead(200).end("ok")
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      if (body.type === "run.succeeded" && !arrived.has(body.data.run_id)) {
        arrived.set(body.data.run_id, { at, created: Date.parse(body.data.created_at) })
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    arrived,
    close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve())))
  }
}

interface Webhooks {
  /** seconds, of those that came */
  readonly delays: Summary
  readonly expected: number
  /** those that had not come when the grace ended, and how long each had been due then at least (s) */
  readonly missing: Array<number>
}

/** Waits up to `grace` s for the first attempt of each succeeded run of the phase; their delays. */
const webhooksOf = async (phase: BPhase, arrived: Map<string, { at: number; created: number }>, grace: number): Promise<Webhooks> => {
  const expected = phase.runs.filter((r) => r.ok && r.runId !== undefined)
  const until = Date.now() + grace * 1000
  while (Date.now() < until && expected.some((r) => !arrived.has(r.runId!))) await sleep(100)
  const now = Date.now()
  return {
    delays: summarize(expected.flatMap((r) => {
      const a = arrived.get(r.runId!)
      return a === undefined ? [] : [(a.at - a.created) / 1000]
    })),
    expected: expected.length,
    missing: expected.filter((r) => !arrived.has(r.runId!)).map((r) => (now - r.answeredAt) / 1000)
  }
}

// ---- A ------------------------------------------------------------------------------------------

/** A's sandbox (8 keys, raised quotas, schedules every second allowed) and its flood process, set up and ready. */
const startA = async (service: Service) => {
  const { key, P } = await service.sandbox("Neighbour A", A_SCOPES)
  const tenant = P.split("/")[3]!
  const op = `/operator/v1/tenants/${tenant}/environments/sandbox`
  const keys = [key]
  for (let i = 1; i < A_KEYS; i++) {
    keys.push((await json(service.base, "POST", `${op}/api-keys`, OPERATOR_TOKEN, { name: `a${i}`, scopes: A_SCOPES })).secret)
  }
  await json(service.base, "PUT", `${op}/quotas/runs_per_day`, OPERATOR_TOKEN, { limit: 10_000_000 })
  await json(service.base, "PUT", `${op}/quotas/storage_bytes`, OPERATOR_TOKEN, { limit: 2 ** 40 })
  await json(service.base, "PATCH", `${op}/settings`, OPERATOR_TOKEN, { schedule_min_interval_seconds: 1 })

  const child = fork(fileURLToPath(new URL("./flood.ts", import.meta.url)), ["--flood"], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
  const waiting = new Map<FromFlood["type"], (message: any) => void>()
  let failure: ((e: Error) => void) | undefined
  child.on("message", (message: FromFlood) => {
    if (message.type === "failed") return failure?.(new Error(`A's flood failed: ${message.message}`))
    if (message.type === "review") {
      void json(service.base, "POST", `/operator/v1/connections/${message.connectionId}/review`, OPERATOR_TOKEN, { decision: "approve" })
        .then(() => tell({ type: "reviewed" }), (e) => failure?.(e))
      return
    }
    waiting.get(message.type)?.(message)
  })
  child.on("exit", (code) => code !== 0 && failure?.(new Error(`A's flood exited (${code})`)))
  const tell = (message: ToFlood) => child.send(message)
  /** The next message of `type` from A's process (its failure rejects). */
  const next = <T extends FromFlood["type"]>(type: T) =>
    new Promise<Extract<FromFlood, { type: T }>>((resolve, reject) => {
      waiting.set(type, resolve)
      failure = reject
    })
  const ready = next("ready")
  tell({ type: "config", config: { ...FLOOD, base: service.base, P, keys } })
  const { idle } = await ready
  return {
    pid: child.pid!,
    idle: idle as IdleFigures,
    go: () => tell({ type: "go" }),
    report: async (from: number, to: number) => {
      const answer = next("report")
      tell({ type: "report", from, to })
      return (await answer).figures as FloodFigures
    },
    stop: async () => {
      failure = undefined
      if (child.exitCode !== null) return
      const exited = new Promise((resolve) => child.once("exit", resolve))
      tell({ type: "stop" })
      await Promise.race([exited, sleep(10_000)])
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }
}

// ---- the report ---------------------------------------------------------------------------------

interface Measured {
  readonly b: BPhase
  readonly webhooks: Webhooks
  readonly cpu: Cpu
  readonly pool: Pool
}

const n0 = (x: number) => (Number.isNaN(x) ? "-" : Math.round(x).toLocaleString("en-US"))
const n1 = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(1))
const n2 = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(2))
const x = (after: number, before: number) => `x${(after / before) >= 10 ? (after / before).toFixed(0) : (after / before).toFixed(2)}`
const yes = (met: boolean) => (met ? "yes" : "NO")

const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => `| ${widths.map((w, i) => (cells[i] ?? "").padEnd(w)).join(" | ")} |`
  return [line(header), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`, ...rows.map(line)].join("\n")
}

const print = (alone: Measured, flooded: Measured, a: FloodFigures, idle: IdleFigures) => {
  const e2e = (m: Measured) => summarize(m.b.runs.map((r) => r.ms))
  const get = (m: Measured) => summarize(m.b.gets.filter((g) => g.status === 200).map((g) => g.ms))
  // runs that ended within the phase, per second of it
  const completed = (m: Measured) => m.b.runs.filter((r) => r.ok && r.started + r.ms <= m.b.from + m.b.seconds * 1000).length / m.b.seconds
  const [r0, r1, g0, g1] = [e2e(alone), e2e(flooded), get(alone), get(flooded)]
  const hooks = (w: Webhooks) =>
    `${n2(w.delays.p50)} / ${w.missing.length > 0 ? `>= ${n1(Math.max(w.delays.max || 0, ...w.missing))}` : n2(w.delays.max)} s` +
    (w.missing.length > 0 ? ` (${w.missing.length} of ${w.expected} never came)` : ` (${w.expected})`)
  const hooksMet = flooded.webhooks.missing.length === 0 && flooded.webhooks.delays.max <= 5
  const cpu = (m: Measured) => `${n0(m.cpu.service)}% / ${n0(m.cpu.postgres)}%`
  const pool = (m: Measured) =>
    `${n1(m.pool.inUse.mean)} (max ${n0(m.pool.inUse.max)}) of ${n0(m.pool.max)} / ${n1(m.pool.waiting.mean)} (max ${
      n0(m.pool.waiting.max)
    })`
  const upload = a.uploads.completed
  const download = a.downloads.completed
  const going = (
    ms: ReadonlyArray<number>
  ) => (ms.length > 0 ? `; ${ms.length} going for ${ms.map((m) => n1(m / 1000)).join(", ")} s at the end` : "")
  console.log(`\nB's figures (${alone.b.seconds} s alone, ${flooded.b.seconds} s while A floods):\n`)
  console.log(table(["B's figure", "B alone", "B while A floods", "ratio", "target", "met"], [
    [
      "run end to end p50 / p99",
      `${n0(r0.p50)} / ${n0(r0.p99)} ms`,
      `${n0(r1.p50)} / ${n0(r1.p99)} ms`,
      `${x(r1.p50, r0.p50)} / ${x(r1.p99, r0.p99)}`,
      "p50 <= x1.25, p99 <= x1.5",
      yes(r1.p50 <= 1.25 * r0.p50 && r1.p99 <= 1.5 * r0.p99)
    ],
    ["runs/s (paced at 10/s)", n1(completed(alone)), n1(completed(flooded)), x(completed(flooded), completed(alone)), "", ""],
    [
      "`GET run` p50 / p99 (4 x 10/s)",
      `${n0(g0.p50)} / ${n0(g0.p99)} ms`,
      `${n0(g1.p50)} / ${n0(g1.p99)} ms`,
      `${x(g1.p50, g0.p50)} / ${x(g1.p99, g0.p99)}`,
      "p99 <= x1.5",
      yes(g1.p99 <= 1.5 * g0.p99)
    ],
    ["webhook first attempt p50 / max", hooks(alone.webhooks), hooks(flooded.webhooks), "", "all within 5 s", yes(hooksMet)],
    ["event commit -> SSE frame (A's streams, mean / p99)", "", `${n0(a.streams.lag.mean)} / ${n0(a.streams.lag.p99)} ms`, "", "", ""],
    [
      "A's 25 MiB upload (median)",
      `${n1(idle.uploadMs / 1000)} s (idle service)`,
      `${n1(upload.p50 / 1000)} s; ${upload.n} finished${going(a.uploads.inProgressMs)}`,
      x(upload.p50, idle.uploadMs),
      "",
      ""
    ],
    [
      "A's 25 MiB download (median)",
      `${n1(idle.downloadMs / 1000)} s (idle service)`,
      `${n1(download.p50 / 1000)} s; ${download.n} finished${going(a.downloads.inProgressMs)}`,
      x(download.p50, idle.downloadMs),
      "",
      ""
    ],
    ["node CPU / Postgres CPU (of a core)", cpu(alone), cpu(flooded), "", "", ""],
    ["database pool in use / waiting (mean)", pool(alone), pool(flooded), "", "", ""]
  ]))
  const others = (m: Measured) => [...m.b.other].map(([status, count]) => `${count} x ${status}`).join(", ") || "none"
  console.log(
    `\nB's answers other than 2xx: alone ${others(alone)}; while A floods ${others(flooded)}. Failed runs: ${
      alone.b.runs.filter((r) => !r.ok).length
    }, ${flooded.b.runs.filter((r) => !r.ok).length}.`
  )
  const machine = (m: Measured) =>
    `bench ${n0(m.cpu.bench)}%, A's process ${n0(m.cpu.flood)}%, everything else on the machine ${n0(m.cpu.other)}%`
  console.log(
    `CPU besides the service and Postgres (of a core; ${os.cpus().length} cores): alone ${machine(alone)}; while A floods ${
      machine(flooded)
    }.`
  )

  const allowedRuns = FLOOD.slots / (idle.runMs / 1000)
  const allowedHooks = WEBHOOK_CELL_CONCURRENCY / WEBHOOK_ATTEMPT_SECONDS
  // a run on the idle service spends this share of its time in tool calls: 64 active runs, as many in flight
  const toolShare = Math.min(1, (FLOOD.toolCalls * FLOOD.toolSeconds * 1000) / idle.runMs)
  const allowedTools = FLOOD.slots * toolShare
  const share = (figure: number, allowed: number) => [`${n0((figure / allowed) * 100)}%`, yes(figure >= 0.9 * allowed)]
  const codes = (r: Record<string, number>) =>
    Object.entries(r).map(([code, perSecond]) => `${code} ${n1(perSecond)}/s`).join(", ") || "none"
  console.log(`\nA's figures while it floods (${n1(a.seconds)} s), against what its limits allow:\n`)
  console.log(table(["A's figure", "measured", "its limits allow", "share", ">= 90%"], [
    [
      "runs completed/s (64 active, 4 tool calls of 2 s)",
      n1(a.runs.completed),
      `${n1(allowedRuns)} (64 / ${n1(idle.runMs / 1000)} s, a run on the idle service)`,
      ...share(a.runs.completed, allowedRuns)
    ],
    [
      "runs in flight / tool calls in flight (mean)",
      `${n1(a.runs.inFlight.mean)} / ${n1(a.toolCalls.inFlight.mean)}`,
      `64 / ${n1(allowedTools)} (CELL_MAX_ACTIVE_RUNS; in tool calls ${n0(toolShare * 100)}% of the idle run)`,
      ...share(a.toolCalls.inFlight.mean, allowedTools)
    ],
    [
      "requests answered/s (all of A's)",
      `${n1(a.requests.answered)} of ${n1(a.requests.sent)} sent`,
      `${RATE_LIMIT} (CELL_RATE_LIMIT_RPS)`,
      ...share(a.requests.answered, RATE_LIMIT)
    ],
    ["requests refused 429/s, by code", codes(a.requests.refused), "", "", ""],
    [
      "the pacer's GETs: answered / 429 per s; p50 / p99",
      `${n1(a.gets.answered)} / ${n1(a.gets.refused)}; ${n0(a.gets.latency.p50)} / ${n0(a.gets.latency.p99)} ms`,
      "",
      "",
      ""
    ],
    [
      "SSE streams open (mean / max); opens refused",
      `${n1(a.streams.open.mean)} / ${n0(a.streams.open.max)}; ${a.streams.refused}`,
      `${FLOOD.slots * FLOOD.streamsPerRun} (CELL_MAX_STREAMS)`,
      ...share(a.streams.open.mean, FLOOD.slots * FLOOD.streamsPerRun)
    ],
    [
      "event commit -> SSE frame p50 / p99 / max",
      `${n0(a.streams.lag.p50)} / ${n0(a.streams.lag.p99)} / ${n0(a.streams.lag.max)} ms (${a.streams.lag.n} frames)`,
      "",
      "",
      ""
    ],
    [
      "webhook attempts received/s (16 endpoints never answering)",
      n2(a.webhooks.received / a.seconds),
      `${n2(allowedHooks)} (${WEBHOOK_CELL_CONCURRENCY} in flight, ${WEBHOOK_ATTEMPT_SECONDS} s each)`,
      ...share(a.webhooks.received / a.seconds, allowedHooks)
    ],
    [
      "schedules: runs fired",
      `${a.schedules.fired}`,
      `${n0(a.schedules.expected)} (${FLOOD.schedules} every second)`,
      ...share(a.schedules.fired, a.schedules.expected)
    ],
    [
      "uploads / downloads refused 429; failed",
      `${a.uploads.refused} / ${a.downloads.refused}; ${a.uploads.failed} / ${a.downloads.failed}`,
      "",
      "",
      ""
    ],
    ["other answers (not 2xx, not 429)", codes(a.requests.other), "", "", ""],
    ["A's process: event loop delay p50 / p99", `${n1(a.loopDelay.p50)} / ${n1(a.loopDelay.p99)} ms`, "", "", ""]
  ]))
}

// ---- main ---------------------------------------------------------------------------------------

const main = async () => {
  const started = performance.now()
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`
  if (!quick && process.env["BENCH_SERVICE_ENTRY"] === undefined && process.env["BENCH_SERVICE_DIR"] === undefined) {
    console.log("building (npm run build)...")
    execFileSync("npm", ["run", "build"], { stdio: "ignore" })
    process.env["BENCH_SERVICE_ENTRY"] = "dist"
  }
  const commit = (() => {
    try {
      return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: serviceDir }).toString().trim()
    } catch {
      return "?"
    }
  })()
  console.log(
    `noisy neighbours${quick ? " (--quick)" : ""}: the service at ${serviceDir} (${commit}, ${
      process.env["BENCH_SERVICE_ENTRY"] === "dist" ? "dist" : "sources through tsx"
    }); ` +
      `load average ${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`
  )
  const db = await startPostgres()
  const hooks = await receiver()
  let service: Service | undefined
  let a: Awaited<ReturnType<typeof startA>> | undefined
  try {
    service = await startService({ DATABASE_URL: db.url, DESTINATION_ALLOWLIST: "127.0.0.1/32" })
    const svc = service
    const b = await provisionB(svc, B_RUNS_PER_SECOND * (PHASES.warm + PHASES.alone + PHASES.flood) + 50)
    await json(svc.base, "POST", `${b.P}/webhook-endpoints`, b.key, { url: hooks.url, event_types: ["run.succeeded"] })
    console.log(`  service up (pid ${svc.pid}), Postgres pid ${db.pid}; B provisioned (${elapsed()})`)
    a = await startA(svc)
    const floodPid = a.pid
    console.log(
      `  A provisioned, its process (pid ${floodPid}) ready: on the idle service a run of A took ${n1(a.idle.runMs / 1000)} s, ` +
        `a 25 MiB upload ${n1(a.idle.uploadMs / 1000)} s, a download ${n1(a.idle.downloadMs / 1000)} s (${elapsed()})`
    )

    const phase = async (seconds: number, grace: number): Promise<Measured & { from: number; to: number }> => {
      const cpu = cpuSince(svc, db.cpu, floodPid)
      const pool = poolSampler(svc)
      const from = Date.now()
      const measured = await loadB(svc, b, seconds)
      const to = Date.now()
      const figures = { cpu: cpu(), pool: await pool() }
      return { b: measured, ...figures, webhooks: await webhooksOf(measured, hooks.arrived, grace), from, to }
    }

    await loadB(svc, b, PHASES.warm)
    console.log(`  B alone, ${PHASES.alone} s (${elapsed()})`)
    const alone = await phase(PHASES.alone, PHASES.grace)
    console.log(`  A floods: ramping up for ${PHASES.ramp} s (${elapsed()})`)
    a.go()
    await sleep(PHASES.ramp * 1000)
    console.log(`  B while A floods, ${PHASES.flood} s (${elapsed()})`)
    const flooded = await phase(PHASES.flood, PHASES.grace)
    const figures = await a.report(flooded.from, flooded.to)
    await a.stop()
    print(alone, flooded, figures, a.idle)
    console.log(
      `\nload average at the end ${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}; bench done in ${elapsed()}`
    )
  } finally {
    await a?.stop()
    await service?.stop()
    await hooks.close()
    await db.stop()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
