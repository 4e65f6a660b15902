/**
 * The run event streams (SSE) out of process: the service is a child process (scripts/bench/child.ts)
 * on its own Postgres (scripts/bench/pg.ts), and this process is the client. Not a test: it prints
 * figures, each next to a baseline measured in the same run with the same client code: a bare
 * node:http server in another child process (`node -e`, BARE below).
 *
 *   node --import tsx scripts/bench/streams.ts [--quick] [--only=idle|latency]
 *
 * 1. Memory per idle stream: 10,000 streams (--quick: 500) on runs that sleep (a scripted `sleep`
 *    of 280 s, under RUN_EXECUTION_SECONDS = 300), so the streams stay open and quiet but for the
 *    service's pings (15 s) and key checks (every SSE_AUTH_CHECK_SECONDS = 5 s; defaults kept).
 *    Figure: the service child's VmRSS once all are open, minus before opening (the cells and runs
 *    already there), per stream, each measured after a settle and a full GC (forced through the
 *    inspector: the child runs with `--inspect` on a free port), with the JS heap and external
 *    memory of `process.memoryUsage()` alongside. Also printed: the CPU opening costs, per stream,
 *    and the CPU the open idle streams keep using. Baseline: as many idle SSE connections on the
 *    bare server, measured the same way. It runs first, on a fresh service.
 * 2. Event commit -> SSE client latency, p99 (and p50), with 1,000 open streams (--quick: 200),
 *    5 per run. Runs of a scripted model with the built-in memory tools emit their events over
 *    ~1 s each, some seconds after their creation (longer than opening all the streams takes, as
 *    test 1 measured the rate): two `memory_get` calls 0.5 s apart (run.tool_call.started /
 *    .completed each), then the answer (run.message, run.succeeded); the runs start 0-0.75 s
 *    apart, so the commits are spread. A sample is an event committed once all streams are open:
 *    the time its chunk arrived here minus its `created_at` (the commit's time, ms precision).
 *    This process also LISTENs to the `run_events` notifications (what the service's event bus
 *    follows), which splits the figure into the commit and the service's fan-out. Baseline: the
 *    bare server holds as many SSE connections and pushes a frame (with `created_at` = now) to all
 *    of them, 5 times 250 ms apart.
 *
 * Limits (docs/configuration.md): a cell (tenant + environment) holds at most CELL_MAX_STREAMS
 * (128, also the maximum) open streams, a caller (an API key: the actor) at most ACTOR_MAX_STREAMS
 * (16, also the maximum). So the streams are spread over sandboxes (one cell each) of 120 streams,
 * with 8 keys per sandbox of 15 streams each. The cell rate limit is raised (CELL_RATE_LIMIT_*):
 * the limiter is not what is measured. The client is node:http with a keep-alive Agent without a
 * socket limit, one socket per stream, and the SSE parser of @effect/experimental (the one
 * scripts/lib/RunEvents.ts uses); idle streams are not parsed at all.
 */
import * as Sse from "@effect/experimental/Sse"
import { spawn } from "node:child_process"
import * as http from "node:http"
import { createRequire } from "node:module"
import { setTimeout as sleep } from "node:timers/promises"
import { pathToFileURL } from "node:url"
import { WebSocket } from "undici"

import { ALL_SCOPES } from "../../src/Kernel/Scopes.js"
import { freePort, json, mib, OPERATOR_TOKEN, quantile, rssOf, type Service, startService } from "./child.js"
import { type BenchPostgres, cpuMs, startPostgres } from "./pg.js"

export type Report = (name: string, figure: number, unit: string, baseline: number, target: string, met: boolean) => void

export interface StreamsBenchOptions {
  /** 500 idle streams instead of 10,000 and 200 instead of 1,000 (the output says so): under a minute. */
  readonly quick: boolean
  readonly report: Report
  /** One of the two only (default both). */
  readonly only?: "idle" | "latency"
}

const STREAMS_PER_CELL = 120 // CELL_MAX_STREAMS is 128 at most
const STREAMS_PER_KEY = 15 // ACTOR_MAX_STREAMS is 16 at most
const KEYS_PER_CELL = Math.ceil(STREAMS_PER_CELL / STREAMS_PER_KEY)
const STREAMS_PER_RUN = 5 // latency: streams on each run
const PUSH_ROUNDS = 5 // latency baseline: frames pushed to every connection
const IDLE_SLEEP_SECONDS = 280 // under RUN_EXECUTION_SECONDS (300, its maximum)
const OPEN_CONCURRENCY = 64 // stream requests awaiting their headers at once

const SCOPES = ALL_SCOPES.filter((scope) => /^(agents|conversations|runs|memory):/.test(scope))

const SERVICE_ENV = {
  CELL_RATE_LIMIT_RPS: "100000",
  CELL_RATE_LIMIT_BURST: "100000"
}

const kib = (bytes: number) => bytes / 1024
const count = (n: number) => n.toLocaleString("en-US")

// ---- the client ---------------------------------------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })

interface OpenStream {
  /** Settles when the stream ends, whoever ends it. */
  readonly done: Promise<void>
  readonly ended: () => boolean
  readonly close: () => void
}

/**
 * Opens an SSE stream: resolves once its 200 headers arrived, rejects on another status. With
 * `onEvent`, each event's JSON is passed with the time its chunk arrived; without, the body is read
 * and dropped unparsed.
 */
const openStream = (url: string, key: string, onEvent?: (event: any, receivedAt: number) => void) =>
  new Promise<OpenStream>((resolve, reject) => {
    const req = http.get(url, { agent, headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } }, (res) => {
      res.setEncoding("utf8")
      if (res.statusCode !== 200) {
        let body = ""
        res.on("data", (chunk: string) => (body += chunk))
        res.on("end", () => reject(new Error(`GET ${url}: ${res.statusCode} ${body}`)))
        return
      }
      let receivedAt = 0
      let ended = false
      const parser = onEvent === undefined ? undefined : Sse.makeParser((frame) => {
        if (frame._tag === "Event") onEvent(JSON.parse(frame.data), receivedAt)
      })
      res.on("data", (chunk: string) => {
        receivedAt = Date.now()
        parser?.feed(chunk)
      })
      const done = new Promise<void>((settle) => {
        const end = () => {
          ended = true
          settle()
        }
        res.once("end", end)
        res.once("close", end)
        res.on("error", end)
      })
      resolve({ done, ended: () => ended, close: () => req.destroy() })
    })
    req.on("error", reject)
  })

/** `f(0..n-1)`, at most `concurrency` at a time, results in order. */
const pool = async <A>(n: number, concurrency: number, f: (i: number) => Promise<A>) => {
  const out: Array<A> = new Array(n)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, async () => {
    while (next < n) {
      const i = next++
      out[i] = await f(i)
    }
  }))
  return out
}

/** What a process's memory is at a moment: VmRSS and its `process.memoryUsage()`. */
interface Memory {
  readonly rss: number
  readonly heapUsed: number
  readonly external: number
}

/**
 * The memory of a process started with `--inspect=127.0.0.1:<inspectPort>` once settled: after
 * `seconds`, a full GC (the inspector's `HeapProfiler.collectGarbage`), then half a second.
 */
const settled = async (pid: number, inspectPort: number, seconds: number): Promise<Memory> => {
  await sleep(seconds * 1000)
  const [target] = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as Array<{ webSocketDebuggerUrl: string }>
  const ws = new WebSocket(target!.webSocketDebuggerUrl)
  const replies = new Map<number, (result: any) => void>()
  ws.addEventListener("message", (m) => {
    const message = JSON.parse(String(m.data))
    replies.get(message.id)?.(message.result)
  })
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve)
    ws.addEventListener("error", reject)
  })
  let id = 0
  const send = (method: string, params: object = {}) =>
    new Promise<any>((resolve) => {
      replies.set(++id, resolve)
      ws.send(JSON.stringify({ id, method, params }))
    })
  try {
    await send("HeapProfiler.collectGarbage")
    await sleep(500)
    const usage = await send("Runtime.evaluate", { expression: "process.memoryUsage()", returnByValue: true })
    return { rss: rssOf(pid), heapUsed: usage.result.value.heapUsed, external: usage.result.value.external }
  } finally {
    ws.close()
  }
}

/** `after - before` per stream, in KiB: RSS, and the JS heap and external memory in it. */
const perStreamKiB = (before: Memory, after: Memory, streams: number) => ({
  rss: kib(after.rss - before.rss) / Math.max(1, streams),
  heap: kib(after.heapUsed - before.heapUsed) / Math.max(1, streams),
  external: kib(after.external - before.external) / Math.max(1, streams)
})
const describe = (m: Memory) => `RSS ${mib(m.rss)} (JS heap ${mib(m.heapUsed)}, external ${mib(m.external)})`
const describePer = (k: ReturnType<typeof perStreamKiB>) =>
  `${k.rss.toFixed(1)} KiB RSS (JS heap ${k.heap.toFixed(1)}, external ${k.external.toFixed(1)})`

// ---- the baseline: a bare node:http SSE server in a child process --------------------------------

/** Holds every GET as an SSE connection; `GET /push` writes one run-event-like frame to all of them. */
const BARE = `
const http = require("node:http")
const clients = new Set()
let seq = 0
const server = http.createServer((req, res) => {
  if (req.url === "/push") {
    seq++
    const event = { id: "evt_" + seq, object: "run_event", type: "run.message", sequence: seq,
      created_at: new Date().toISOString(), data: { pad: "x".repeat(300) } }
    const frame = "id: evt_" + seq + "\\nevent: run.message\\ndata: " + JSON.stringify(event) + "\\n\\n"
    for (const c of clients) c.write(frame)
    res.end(String(clients.size))
    return
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" })
  res.write(": open\\n\\n")
  clients.add(res)
  res.on("close", () => clients.delete(res))
})
server.listen(Number(process.env.PORT), "127.0.0.1", () => console.log("up"))
`

const startBare = async () => {
  const port = await freePort()
  const inspectPort = await freePort()
  const child = spawn(process.execPath, [`--inspect=127.0.0.1:${inspectPort}`, "-e", BARE], {
    env: { ...process.env, PORT: String(port) },
    stdio: ["ignore", "pipe", "ignore"] // stderr: the inspector's chatter
  })
  await new Promise((resolve, reject) => {
    child.stdout.once("data", resolve)
    child.once("exit", (code) => reject(new Error(`the bare server exited (${code})`)))
  })
  const base = `http://127.0.0.1:${port}`
  return {
    pid: child.pid!,
    inspectPort,
    url: `${base}/events`,
    push: async () => Number(await (await fetch(`${base}/push`)).text()),
    stop: () => void child.kill("SIGKILL")
  }
}

// ---- provisioning -------------------------------------------------------------------------------

interface Cell {
  readonly P: string
  /** KEYS_PER_CELL keys; the first creates the runs. */
  readonly keys: ReadonlyArray<string>
  readonly workspaceId: string
  readonly agentId: string
}

/** `streams` split over as few cells as hold them (at most STREAMS_PER_CELL each), evenly. */
const split = (streams: number) => {
  const cells = Math.ceil(streams / STREAMS_PER_CELL)
  return Array.from({ length: cells }, (_, i) => Math.floor(streams / cells) + (i < streams % cells ? 1 : 0))
}

/** A sandbox (its own cell) with KEYS_PER_CELL keys, a workspace and an agent. */
const provisionCell = async (svc: Service, name: string): Promise<Cell> => {
  const { key, P } = await svc.sandbox(name, SCOPES)
  const tenantId = P.split("/")[3]!
  const more = await Promise.all(
    Array.from(
      { length: KEYS_PER_CELL - 1 },
      () =>
        json(svc.base, "POST", `/operator/v1/tenants/${tenantId}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
          name: "bench",
          scopes: SCOPES
        })
    )
  )
  const workspace = await json(svc.base, "POST", `${P}/workspaces`, key, { name: "w" })
  const agentRow = await json(svc.base, "POST", `${P}/agents`, key, { workspace_id: workspace.data.id, name: "a" })
  return { P, keys: [key, ...more.map((k) => k.secret as string)], workspaceId: workspace.data.id, agentId: agentRow.data.id }
}

/** Provisions `cells` cells, each tried again (twice, a new sandbox) when the service could not be reached. */
const provision = (svc: Service, label: string, cells: number) =>
  pool(cells, 8, async (i) => {
    for (let attempt = 1;; attempt++) {
      try {
        return await provisionCell(svc, `Bench ${label} ${i}`)
      } catch (e) {
        if (attempt === 3 || !(e instanceof TypeError)) throw e // TypeError: fetch failed (no HTTP answer)
        console.log(`  (!) provisioning: ${e.message} (${String((e.cause as any)?.code ?? e.cause)}); again in 2 s`)
        await sleep(2000)
      }
    }
  })

/** A revision of the cell's agent on a scripted model profile with these steps. */
const revision = async (svc: Service, cell: Cell, steps: ReadonlyArray<unknown>, memory: boolean) => {
  const key = cell.keys[0]!
  const profile = await json(svc.base, "POST", `${cell.P}/model-profiles`, key, {
    name: "s",
    provider: "scripted",
    model: "s",
    settings: { steps }
  })
  const rev = await json(svc.base, "POST", `${cell.P}/agents/${cell.agentId}/revisions`, key, {
    model_profile_id: profile.data.id,
    instructions: "",
    tool_ids: [],
    memory
  })
  return rev.data.id as string
}

/** A new conversation on `revisionId` and a run in it: the run's events stream URL. */
const startRun = async (svc: Service, cell: Cell, revisionId: string) => {
  const key = cell.keys[0]!
  const conversation = await json(svc.base, "POST", `${cell.P}/conversations`, key, {
    workspace_id: cell.workspaceId,
    agent_revision_id: revisionId
  })
  const run = await json(svc.base, "POST", `${cell.P}/conversations/${conversation.data.id}/runs`, key, {
    input: [{ type: "text", text: "x" }]
  })
  return `${svc.base}${cell.P}/runs/${run.data.id}/events/stream`
}

// ---- 2. event commit -> SSE client latency --------------------------------------------------------

/** Steps of a run whose events come over ~1 s after `firstSleep`: two memory tool calls, then the answer. */
const busySteps = (firstSleep: number) => [
  { type: "sleep", seconds: firstSleep },
  { type: "tool_call", tool: "memory_get", input: { key: "bench" } },
  { type: "sleep", seconds: 0.5 },
  { type: "tool_call", tool: "memory_get", input: { key: "bench" } },
  { type: "sleep", seconds: 0.5 },
  { type: "text", text: "late" }
]

/** A frame as the client saw it: its event, its commit time and when its chunk arrived (ms). */
interface Arrival {
  readonly event: string
  readonly committed: number
  readonly receivedAt: number
}

const summary = (xs: ReadonlyArray<number>) => `p50 ${quantile(xs, 0.5)} ms, p99 ${quantile(xs, 0.99)} ms, max ${quantile(xs, 1)} ms`

interface PgListener {
  connect(): Promise<void>
  query(text: string): Promise<unknown>
  on(event: "notification", f: (n: { payload?: string }) => void): void
  end(): Promise<void>
}
const PgClient = createRequire(import.meta.url)("pg").Client as new(config: { connectionString: string }) => PgListener

/**
 * When each run event's notification (channel `run_events`, sent by a trigger at commit: what the
 * service's event bus listens to) reached this process, by `<run_id>/<sequence>`: it splits the
 * latency into the commit (created_at -> notification) and the service's fan-out (notification -> frame).
 */
const listenCommits = async (url: string) => {
  const client = new PgClient({ connectionString: url })
  await client.connect()
  const notified = new Map<string, number>()
  client.on("notification", (n) => {
    const at = Date.now()
    try {
      // a statement's notes (migration 0029), or one event's note (before it)
      const notice = JSON.parse(n.payload ?? "")
      for (const note of notice.events ?? [notice]) notified.set(`${note.run_id}/${note.sequence}`, at)
    } catch {
      // not ours
    }
  })
  await client.query("LISTEN run_events")
  return { notified, stop: () => client.end().catch(() => undefined) }
}

/**
 * Test 2 once. When opening the streams took longer than the runs' quiet start (the events came
 * before every stream was open, so few or none count) and `lastTry` is false, it reports nothing
 * and returns the quiet start to try again with (1.5 times the opening, at most 60 s).
 */
const latency = async (
  svc: Service,
  pg: BenchPostgres,
  streams: number,
  quiet: number,
  scaled: string,
  report: Report,
  lastTry: boolean
): Promise<number | undefined> => {
  const sizes = split(streams)
  const cells = await provision(svc, "latency", sizes.length)
  const revisions = await Promise.all(
    cells.map((cell) => Promise.all([0, 0.25, 0.5, 0.75].map((s) => revision(svc, cell, busySteps(quiet + s), true))))
  )
  // run r of cell c: the cell's streams r * STREAMS_PER_RUN.., their keys round-robin
  const runs = cells.flatMap((cell, c) =>
    Array.from({ length: Math.ceil(sizes[c]! / STREAMS_PER_RUN) }, (_, r) => ({ cell, c, r, first: r * STREAMS_PER_RUN }))
  )
  console.log(
    `  ${count(streams)} streams in ${cells.length} cells on ${runs.length} runs (${STREAMS_PER_RUN} each); ` +
      `their events start ${quiet}-${quiet + 0.75} s after each run's creation${scaled}`
  )
  const commits = await listenCommits(pg.url)
  await pg.resetStatements()
  const arrivals: Array<Arrival> = []
  const failures: Array<string> = []
  let opened: Array<OpenStream> = []
  let allOpen = 0
  let outcome: "done" | "timeout" = "done"
  const created = Date.now()
  try {
    const urls = await pool(runs.length, 16, (i) => startRun(svc, runs[i]!.cell, revisions[runs[i]!.c]![runs[i]!.r % 4]!))
    const targets = runs.flatMap((run, i) =>
      Array.from({ length: Math.min(STREAMS_PER_RUN, sizes[run.c]! - run.first) }, (_, k) => ({
        url: urls[i]!,
        key: run.cell.keys[(run.first + k) % KEYS_PER_CELL]!
      }))
    )
    opened = (await pool(targets.length, OPEN_CONCURRENCY, (i) =>
      openStream(targets[i]!.url, targets[i]!.key, (event, receivedAt) => {
        arrivals.push({ event: `${event.run_id}/${event.sequence}`, committed: Date.parse(event.created_at), receivedAt })
      }).catch((e) => void failures.push(String(e))))).filter((s): s is OpenStream => s !== undefined)
    allOpen = Date.now()
    if (allOpen - created > quiet * 1000) {
      console.log(`  (!) opening took ${((allOpen - created) / 1000).toFixed(1)} s, longer than the runs' quiet start`)
    }
    outcome = await Promise.race([
      Promise.all(opened.map((s) => s.done)).then(() => "done" as const),
      sleep((quiet + 60) * 1000).then(() => "timeout" as const)
    ])
  } finally {
    for (const s of opened) s.close()
    await commits.stop()
  }
  // Only events committed once every stream was open: the figure is about open streams.
  const live = arrivals.filter((a) => a.committed > allOpen)
  const total = live.map((a) => a.receivedAt - a.committed)
  const fanOut = live.flatMap((a) => {
    const at = commits.notified.get(a.event)
    return at === undefined ? [] : [a.receivedAt - at]
  })
  const events = new Map(live.map((a) => [a.event, a.committed]))
  const commit = [...events].flatMap(([event, committed]) => {
    const at = commits.notified.get(event)
    return at === undefined ? [] : [at - committed]
  })
  console.log(
    `  service: ${count(opened.length)} streams open ${((allOpen - created) / 1000).toFixed(1)} s after the first run's ` +
      `creation; ${count(live.length)} frames (${count(events.size)} events) committed after that, of ${count(arrivals.length)}` +
      (failures.length > 0 ? `; (!) ${failures.length} streams refused, e.g. ${failures[0]}` : "") +
      (outcome === "timeout" ? "; (!) streams still open after the runs should have ended were closed" : "")
  )
  console.log(`    created_at -> frame:        ${summary(total)}`)
  console.log(`    created_at -> notification: ${summary(commit)} (the commit: Postgres NOTIFY reached this process)`)
  console.log(`    notification -> frame:      ${summary(fanOut)} (the service's fan-out)`)
  const slowest = await pg.query(
    `SELECT calls, round(mean_exec_time::numeric, 1) AS mean, round(max_exec_time::numeric, 1) AS max,
            left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS query
     FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 3`
  )
  console.log(`    Postgres meanwhile, the statements of most time (ms):`)
  for (const r of slowest) console.log(`      ${r.calls} calls, mean ${r.mean}, max ${r.max}: ${r.query}`)
  const p99 = quantile(total, 0.99)
  if (!lastTry && allOpen - created > quiet * 1000) {
    const again = Math.min(60, Math.ceil(2 + (1.5 * (allOpen - created)) / 1000))
    console.log(`  (!) measured again on new cells, the runs' events starting ${again} s after their creation`)
    return again
  }

  const bare = await startBare()
  try {
    const baseArrivals: Array<Arrival> = []
    const connections = await pool(opened.length, OPEN_CONCURRENCY, () =>
      openStream(bare.url, cells[0]!.keys[0]!, (event, receivedAt) => {
        baseArrivals.push({ event: event.id, committed: Date.parse(event.created_at), receivedAt })
      }))
    for (let round = 0; round < PUSH_ROUNDS; round++) {
      await bare.push()
      await sleep(250)
    }
    await sleep(250)
    for (const s of connections) s.close()
    const baseline = baseArrivals.map((a) => a.receivedAt - a.committed)
    console.log(
      `  baseline: ${count(baseline.length)} frames on ${count(connections.length)} connections (${PUSH_ROUNDS} pushes): ` +
        summary(baseline)
    )
    report(
      `event commit -> SSE client p99 (${count(streams)} streams${scaled})`,
      p99,
      "ms",
      Math.max(1, quantile(baseline, 0.99)),
      "p99 <= 25 ms",
      p99 <= 25 && failures.length === 0 && outcome === "done"
    )
  } finally {
    bare.stop()
  }
}

// ---- 1. memory per idle stream --------------------------------------------------------------------

/**
 * Opens `n` idle streams (`target(i)`: the URL and key of the i-th), printing the RSS of `pid` as it
 * goes; none is opened after `deadline` (Date.now()).
 */
const openIdle = async (pid: number, n: number, target: (i: number) => { url: string; key: string }, deadline: number) => {
  const failures: Array<string> = []
  const started = Date.now()
  let late = 0
  const streams = await pool(n, OPEN_CONCURRENCY, async (i) => {
    if (i === Math.floor(n / 2)) console.log(`    half open: RSS ${mib(rssOf(pid))}`)
    if (Date.now() > deadline) return void late++
    const { key, url } = target(i)
    return openStream(url, key).catch((e) => void failures.push(String(e)))
  })
  const open = streams.filter((s): s is OpenStream => s !== undefined)
  const seconds = (Date.now() - started) / 1000
  console.log(`    ${count(open.length)} open in ${seconds.toFixed(1)} s (${(open.length / seconds).toFixed(0)}/s): RSS ${mib(rssOf(pid))}`)
  if (failures.length > 0) console.log(`    (!) ${failures.length} refused, e.g. ${failures[0]}`)
  if (late > 0) console.log(`    (!) ${late} not opened: the runs would have ended before the measurement`)
  return { open, failures, perSecond: open.length / seconds }
}

const idleMemory = async (
  svc: Service,
  inspectPort: number,
  pg: BenchPostgres,
  streams: number,
  scaled: string,
  report: Report,
  settle: number
) => {
  const sizes = split(streams)
  const cells = await provision(svc, "idle", sizes.length)
  const urls = await pool(cells.length, 8, async (c) => {
    const rev = await revision(svc, cells[c]!, [{ type: "sleep", seconds: IDLE_SLEEP_SECONDS }, { type: "text", text: "late" }], false)
    return startRun(svc, cells[c]!, rev)
  })
  // The runs end after IDLE_SLEEP_SECONDS: the streams must be open and measured before.
  const deadline = Date.now() + (IDLE_SLEEP_SECONDS - 3 * settle - 20) * 1000
  // stream i: cell c, its j-th stream, on the cell's run with key j % KEYS_PER_CELL
  const targets: Array<{ url: string; key: string }> = []
  sizes.forEach((size, c) => {
    for (let j = 0; j < size; j++) targets.push({ url: urls[c]!, key: cells[c]!.keys[j % KEYS_PER_CELL]! })
  })
  console.log(`  ${count(streams)} idle streams in ${cells.length} cells, one sleeping run each${scaled}`)

  const before = await settled(svc.pid, inspectPort, settle)
  console.log(`  service before: ${describe(before)}`)
  const cpu = () => ({ at: performance.now(), service: cpuMs(svc.pid), postgres: pg.cpu() })
  const opening = cpu()
  const { failures, open, perSecond } = await openIdle(svc.pid, streams, (i) => targets[i]!, deadline)
  let after: Memory | undefined
  try {
    const opened = cpu()
    // full size: 20 s, longer than a ping interval (15 s), so that what idle streams do periodically shows
    await sleep(2 * settle * 1000)
    const idle = cpu()
    const perOpen = (of: "service" | "postgres") => ((opened[of] - opening[of]) / Math.max(1, open.length)).toFixed(1)
    const share = (of: "service" | "postgres") => `${((idle[of] - opened[of]) / (idle.at - opened.at) * 100).toFixed(0)}%`
    console.log(
      `    CPU: opening took ${perOpen("service")} ms of the service and ${perOpen("postgres")} ms of Postgres per stream; ` +
        `then, over ${2 * settle} s with the streams idle: service ${share("service")}, Postgres ${share("postgres")} of a core`
    )
    after = await settled(svc.pid, inspectPort, 0)
  } finally {
    const ended = open.filter((s) => s.ended()).length
    if (ended > 0) console.log(`    (!) ${ended} streams ended before the measurement`)
    for (const s of open) s.close()
  }
  const service = perStreamKiB(before, after, open.length)
  console.log(`  service after: ${describe(after)}: ${describePer(service)} per stream`)

  const bare = await startBare()
  try {
    const baseBefore = await settled(bare.pid, bare.inspectPort, 1)
    const base = await openIdle(bare.pid, open.length, () => ({ url: bare.url, key: cells[0]!.keys[0]! }), Infinity)
    const baseAfter = await settled(bare.pid, bare.inspectPort, settle)
    for (const s of base.open) s.close()
    const baseline = perStreamKiB(baseBefore, baseAfter, base.open.length)
    console.log(`  baseline: ${describe(baseBefore)} -> ${describe(baseAfter)}: ${describePer(baseline)} per connection`)
    report(
      `idle SSE stream, server RSS (${count(streams)} streams${scaled})`,
      service.rss,
      "KiB/stream",
      baseline.rss,
      "<= 20 KiB",
      service.rss <= 20 && failures.length === 0
    )
  } finally {
    bare.stop()
  }
  return { perSecond }
}

// ---- main -----------------------------------------------------------------------------------------

/** Waits until the service answers /readyz again (after thousands of streams closed at once). */
const awaitResponsive = async (svc: Service) => {
  const started = Date.now()
  while (Date.now() - started < 120_000) {
    const up = await fetch(`${svc.base}/readyz`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false)
    if (up) break
    await sleep(250)
  }
  const seconds = (Date.now() - started) / 1000
  if (seconds > 1) console.log(`  (!) the service answered /readyz again ${seconds.toFixed(1)} s after the idle streams closed`)
}

/**
 * Both benchmarks (or one: `only`) on their own Postgres and service child, stopped at the end
 * (also on failure; the service's last output is printed then). The idle one runs first, on a fresh
 * service, so its RSS delta is not absorbed by heap that the latency one grew.
 */
export const streamsBench = async ({ only, quick, report }: StreamsBenchOptions): Promise<void> => {
  const scaled = quick ? ", scaled down (--quick)" : ""
  const pg = await startPostgres()
  let svc: Service | undefined
  let output = ""
  try {
    // The inspector (no session but while measuring) is how the memory figures force a full GC.
    const inspectPort = await freePort()
    svc = await startService({ DATABASE_URL: pg.url, NODE_OPTIONS: `--inspect=127.0.0.1:${inspectPort}`, ...SERVICE_ENV })
    const keep = (chunk: unknown) => (output = (output + String(chunk)).slice(-4000))
    svc.child.stdout?.on("data", keep)
    svc.child.stderr?.on("data", keep)
    const t0 = performance.now()
    const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)} s`
    let perSecond = 50 // streams opened per second, when test 1 does not measure it
    if (only !== "latency") {
      console.log(`streams 1. memory per idle stream (service up)`)
      perSecond = (await idleMemory(svc, inspectPort, pg, quick ? 500 : 10_000, scaled, report, quick ? 1 : 10)).perSecond
      await awaitResponsive(svc)
    }
    if (only !== "idle") {
      console.log(`streams 2. event commit -> SSE client latency (${elapsed()})`)
      // The runs' first events come after all streams are open: 1.5 times the time opening them took above.
      const streams = quick ? 200 : 1_000
      const again = await latency(svc, pg, streams, Math.min(60, Math.ceil(2 + (1.5 * streams) / perSecond)), scaled, report, false)
      if (again !== undefined) await latency(svc, pg, streams, again, scaled, report, true)
    }
    console.log(`streams: done (${elapsed()})`)
  } catch (e) {
    const exit = svc?.child.exitCode
    console.error(`streams: failed; the service ${exit === null ? "is running" : `exited (${exit})`}; its last output:\n${output}`)
    throw e
  } finally {
    await svc?.stop()
    await pg.stop()
    agent.destroy()
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const rows: Array<string> = []
  const report: Report = (name, figure, unit, baseline, target, met) => {
    rows.push(
      `| ${name} | ${figure.toFixed(2)} ${unit} | ${baseline.toFixed(2)} ${unit} | ${(figure / baseline).toFixed(2)} | ${target} | ${
        met ? "yes" : "NO"
      } |`
    )
    console.log(`  ${name}: ${figure.toFixed(2)} ${unit} (baseline ${baseline.toFixed(2)}) -> ${met ? "met" : "NOT met"}`)
  }
  const t0 = performance.now()
  const only = process.argv.find((a) => a.startsWith("--only="))?.slice("--only=".length)
  if (only !== undefined && only !== "idle" && only !== "latency") throw new Error("--only=idle or --only=latency")
  streamsBench({ quick: process.argv.includes("--quick"), report, ...(only === undefined ? {} : { only }) }).then(
    () => {
      console.log(`\n| benchmark | figure | baseline | ratio | target | met |\n|---|---|---|---|---|---|`)
      for (const row of rows) console.log(row)
      console.log(`\ntotal ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    },
    (e) => {
      console.error(e)
      process.exitCode = 1
    }
  ).finally(() => process.exit())
}
