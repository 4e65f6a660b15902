/**
 * The run path's benchmarks (issue 20), out of process: the service runs as a child process on the
 * bench's own Postgres (scripts/bench/pg.ts: fsync on, pg_stat_statements), and autocannon drives
 * it over HTTP from this process. Each figure is printed with a baseline measured in the same run
 * and the ratio, and each load phase with what one run cost: the service's CPU, Postgres's CPU,
 * top-level SQL statements (BEGIN/COMMIT apart) and write transactions (the xid counter's advance).
 *
 *   1. A scripted run end to end (`Prefer: wait`) at C=1 and C=16 over 32 cells, vs the real
 *      durable-execution peer (issue 37): DBOS 5.3, a workflow of one step and a result, in its
 *      own process (scripts/bench/dbos.ts, no HTTP), on its own database of the same Postgres at
 *      the same concurrency, measured first, alone on the cluster, with the same counters. The
 *      raw-`pg` floor (DBOS's statements by hand, in this process) is printed as information.
 *   2. Admission (202) at C=16 vs single-row INSERT transactions at C=16.
 *   3. `GET run` vs a bare node:http hello world (its own child process) at C=16; the same hello
 *      world served by the pinned `@effect/platform-node` server is printed as information (the
 *      floor of any route the service serves).
 *   4. Cost stays flat: an events page near the end of a 100,000-event run vs a 10-event run;
 *      (full mode) admission with 1M stored runs vs the empty database.
 */
import autocannon from "autocannon"
import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { createRequire } from "node:module"
import * as readline from "node:readline"
import { fileURLToPath } from "node:url"

import { freePort, json, OPERATOR_TOKEN, type Service, startService } from "./child.js"
import { type BenchPostgres, cpuMs, startPostgres } from "./pg.js"

const require = createRequire(import.meta.url)
interface PgClient {
  connect(): Promise<void>
  query(text: string, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<Record<string, any>> }>
  end(): Promise<void>
}
const pg = require("pg") as { Client: new(config: { connectionString: string }) => PgClient }

/** A row of the table; `met` undefined: a figure printed as information, not a target. */
export type Report = (name: string, figure: number, unit: string, baseline: number, target: string, met: boolean | undefined) => void

const CELLS = 32

interface Cell {
  readonly P: string
  readonly key: string
  readonly tenant: string
  readonly workspace: string
  readonly revision: string
}

const provision = async (service: Service, i: number): Promise<Cell> => {
  const base = service.base
  const pilot = await json(base, "POST", "/operator/v1/pilot-applications", OPERATOR_TOKEN, {
    organization_name: `Bench ${i}`,
    contact_email: "b@bench.test"
  })
  const approved = await json(base, "POST", `/operator/v1/pilot-applications/${pilot.id}/approve`, OPERATOR_TOKEN)
  const tenant = approved.tenant_id as string
  const key = await json(base, "POST", `/operator/v1/tenants/${tenant}/environments/sandbox/api-keys`, OPERATOR_TOKEN, {
    name: "bench",
    scopes: ["agents:read", "agents:write", "conversations:read", "conversations:write", "runs:read", "runs:write"]
  })
  const P = `/v1/tenants/${tenant}/environments/sandbox`
  const k = key.secret as string
  const ws = await json(base, "POST", `${P}/workspaces`, k, { name: "w" })
  const agent = await json(base, "POST", `${P}/agents`, k, { workspace_id: ws.data.id, name: "a" })
  const mp = await json(base, "POST", `${P}/model-profiles`, k, {
    name: "s",
    provider: "scripted",
    model: "s",
    settings: { steps: [{ type: "text", text: "ok {{input}}" }] }
  })
  const rev = await json(base, "POST", `${P}/agents/${agent.data.id}/revisions`, k, {
    model_profile_id: mp.data.id,
    instructions: "",
    tool_ids: []
  })
  return { P, key: k, tenant, workspace: ws.data.id, revision: rev.data.id }
}

/** `count` new conversations per cell, written directly (the bench measures runs, not conversations). */
const conversations = async (db: BenchPostgres, cells: ReadonlyArray<Cell>, count: number, tag: string) => {
  const out: Array<{ cell: Cell; id: string }> = []
  for (const [i, cell] of cells.entries()) {
    const rows = await db.query(
      `INSERT INTO conversations (id, tenant_id, environment, workspace_id, agent_revision_id, created_by_key_id, created_at)
       SELECT 'conv_bench_' || $1 || '_' || $2 || '_' || g, c.tenant_id, c.environment, c.workspace_id, c.agent_revision_id,
              k.id, now()
       FROM generate_series(1, $3) g, (SELECT * FROM agent_revisions WHERE id = $4) r
       JOIN LATERAL (SELECT $5::text AS tenant_id, 'sandbox' AS environment, $6::text AS workspace_id, r.id AS agent_revision_id) c ON true
       JOIN LATERAL (SELECT id FROM api_keys WHERE tenant_id = $5 ORDER BY created_at LIMIT 1) k ON true
       RETURNING id`,
      [tag, i, count, cell.revision, cell.tenant, cell.workspace]
    )
    for (const r of rows) out.push({ cell, id: r.id })
  }
  // interleave the cells
  return out.sort((a, b) => (a.id.split("_").pop()! < b.id.split("_").pop()! ? -1 : 1))
}

interface Costs {
  readonly node: number
  readonly pg: number
  /** top-level statements, the background's included */
  readonly statements: number
  /** of which the background's, estimated from its idle rate */
  readonly backgroundStatements: number
  readonly txControl: number
  readonly xids: number
  /** write transactions of the background work, estimated from its idle rate: not in `xids` */
  readonly backgroundXids: number
}

/**
 * What is measured: a process on the bench's Postgres (the service, or DBOS's), its CPU, its
 * background's rates when idle (the service's cluster runner, DBOS's queue and schedule polls) and,
 * when it has one to itself, its database.
 */
interface Subject {
  readonly name: string
  readonly cpu: () => number
  readonly database?: string
  /** per millisecond */
  background: { xids: number; statements: number }
}

/** Measures the idle subject's write transactions and statements for `seconds`. */
const measureBackground = async (db: BenchPostgres, subject: Subject, seconds: number) => {
  await db.resetStatements()
  const x0 = await db.xid()
  const t0 = performance.now()
  await new Promise((r) => setTimeout(r, seconds * 1000))
  const x1 = await db.xid()
  const s = await db.statements(subject.database)
  const elapsed = performance.now() - t0
  subject.background = { xids: (x1 - x0) / elapsed, statements: s.statements / elapsed }
  console.log(
    `  idle ${subject.name}: ${(subject.background.xids * 1000).toFixed(2)} write tx/s (subtracted below),` +
      ` ${(subject.background.statements * 1000).toFixed(1)} statements/s (counted below, and apart)`
  )
}

/** What `work` cost, per unit of what it returns; its `cpuMs`, when it says, is the subject's CPU. */
const measured = async <A extends { readonly count: number; readonly cpuMs?: number }>(
  db: BenchPostgres,
  subject: Subject,
  work: () => Promise<A>
) => {
  await db.resetStatements()
  const node0 = subject.cpu()
  const pg0 = db.cpu()
  const x0 = await db.xid()
  const t0 = performance.now()
  const result = await work()
  const x1 = await db.xid()
  const elapsed = performance.now() - t0
  const node1 = subject.cpu()
  const pg1 = db.cpu()
  const s = await db.statements(subject.database)
  const n = Math.max(1, result.count)
  const background = subject.background.xids * elapsed
  const costs: Costs = {
    node: (result.cpuMs ?? node1 - node0) / n,
    pg: (pg1 - pg0) / n,
    statements: s.statements / n,
    backgroundStatements: (subject.background.statements * elapsed) / n,
    txControl: s.txControl / n,
    // the bench's own xid reads take none; the background's, at its idle rate, are not the runs'
    xids: Math.max(0, x1 - x0 - background) / n,
    backgroundXids: background / n
  }
  return { result, costs }
}

const printCosts = (label: string, c: Costs) =>
  console.log(
    `    per ${label}: node CPU ${c.node.toFixed(2)} ms, Postgres CPU ${c.pg.toFixed(2)} ms,` +
      ` ${c.statements.toFixed(1)} top-level statements (~${c.backgroundStatements.toFixed(2)} of them the background's;` +
      ` +${c.txControl.toFixed(1)} BEGIN/COMMIT), ${c.xids.toFixed(2)} write tx (+${c.backgroundXids.toFixed(2)} the background's)`
  )

/** A closed loop of `connections` over HTTP for `seconds`. */
const load = (options: autocannon.Options) =>
  new Promise<autocannon.Result>((resolve, reject) =>
    autocannon({ ...options }, (error, result) => (error ? reject(error) : resolve(result)))
  )

type Conversation = { readonly cell: Cell; readonly id: string }

/** `createRun` on the conversation `take` gives, each request's own idempotency key; `prefer`: its Prefer header. */
const createRuns = (
  service: Service,
  connections: number,
  seconds: number,
  take: () => Conversation,
  options: { readonly prefer?: string; readonly answered?: (status: number, body: string, c: Conversation) => void } = {}
) =>
  load({
    url: service.base,
    connections,
    duration: seconds,
    requests: [{
      method: "POST",
      setupRequest: (req: any, context: any) => {
        const c = take()
        context.conv = c
        return {
          ...req,
          path: `${c.cell.P}/conversations/${c.id}/runs`,
          headers: {
            "content-type": "application/json",
            authorization: `Bearer ${c.cell.key}`,
            "idempotency-key": randomUUID(),
            ...(options.prefer === undefined ? {} : { prefer: options.prefer })
          },
          body: JSON.stringify({ input: [{ type: "text", text: "x" }] })
        }
      },
      onResponse: (status: number, body: string, context: any) => options.answered?.(status, body, context.conv)
    }] as any
  })

/** The next of `fresh` conversations (the bench's pools are made larger than a phase needs). */
const takeFresh = (fresh: Array<Conversation>) => () => {
  const c = fresh.pop()
  if (c === undefined) throw new Error("the bench ran out of fresh conversations: raise its pool")
  return c
}

/**
 * Runs with `Prefer: wait`, each on a fresh conversation: a run's cost, not its conversation's
 * history's (a DBOS workflow has none). Returning each conversation to the pool made the phase at
 * C=1 one conversation of ~900 items by its end, read and sent to the model by every run.
 */
const endToEnd = async (service: Service, fresh: Array<Conversation>, connections: number, seconds: number) => {
  const result = await createRuns(service, connections, seconds, takeFresh(fresh), {
    prefer: "wait=10",
    answered: (status, body) => {
      if (status !== 200 || !body.includes(`"status":"succeeded"`)) console.log(`    unexpected: ${status} ${body.slice(0, 200)}`)
    }
  })
  return { count: result["2xx"], result }
}

/** Admissions (202), each on a fresh conversation. */
const admission = async (service: Service, fresh: Array<Conversation>, connections: number, seconds: number) => {
  const result = await createRuns(service, connections, seconds, takeFresh(fresh))
  return { count: result["2xx"], result }
}

/** Single-row INSERT transactions, `connections` clients in a closed loop: the admission baseline. */
const inserts = async (url: string, connections: number, seconds: number) => {
  const clients = await Promise.all(Array.from({ length: connections }, async () => {
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    return c
  }))
  await clients[0]!.query(
    `CREATE TABLE IF NOT EXISTS bench_rows (id text PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL)`
  )
  let count = 0
  const until = performance.now() + seconds * 1000
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < until) {
      await c.query(`INSERT INTO bench_rows (id, payload, created_at) VALUES ($1, $2, now())`, [randomUUID(), "{\"x\":1}"])
      count++
    }
  }))
  await Promise.all(clients.map((c) => c.end()))
  return count / seconds
}

/**
 * DBOS 5.3 in its own process (scripts/bench/dbos.ts) on a database of its own (`dbos_bench`, its
 * system database): `phase(c, s)` runs its workflows `c` at once for `s` seconds.
 */
const startDbos = async (db: BenchPostgres) => {
  await db.query("CREATE DATABASE dbos_bench")
  const url = db.url.replace(/\/bench$/, "/dbos_bench")
  const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("dbos.ts", import.meta.url)), url], {
    stdio: ["pipe", "pipe", "pipe"]
  })
  let errors = ""
  child.stderr.on("data", (c) => (errors += c))
  const messages: Array<Record<string, any>> = []
  const waiting: Array<{ resolve: (m: Record<string, any>) => void; reject: (e: Error) => void }> = []
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    let message: unknown
    try {
      message = JSON.parse(line)
    } catch {
      return // DBOS's own logging
    }
    if (typeof message !== "object" || message === null || !("bench" in message)) return
    const waiter = waiting.shift()
    if (waiter === undefined) messages.push(message)
    else waiter.resolve(message)
  })
  child.on("exit", (code, signal) => {
    for (const w of waiting.splice(0)) w.reject(new Error(`the DBOS peer exited (${code ?? signal}):\n${errors}`))
  })
  const next = () =>
    messages.length > 0
      ? Promise.resolve(messages.shift()!)
      : child.exitCode !== null || child.signalCode !== null
      ? Promise.reject(new Error(`the DBOS peer exited:\n${errors}`))
      : new Promise<Record<string, any>>((resolve, reject) => waiting.push({ resolve, reject }))
  await next()
  const subject: Subject = { name: "DBOS", cpu: () => cpuMs(child.pid!), database: "dbos_bench", background: { xids: 0, statements: 0 } }
  const phase = async (connections: number, seconds: number) => {
    child.stdin.write(`${JSON.stringify({ connections, seconds })}\n`)
    const m = await next()
    return { count: m.count as number, perSecond: m.count / (m.ms / 1000), p50: m.p50 as number, cpuMs: m.cpuMs as number }
  }
  const stop = async () => {
    child.stdin.end()
    for (let i = 0; i < 50 && child.exitCode === null && child.signalCode === null; i++) await new Promise((r) => setTimeout(r, 100))
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  }
  return { subject, phase, stop }
}

/**
 * The raw-`pg` floor: a durable workflow in DBOS's shape written by hand (its `workflow_status` and
 * `operation_outputs`): start (one write transaction), one step's output (one), the result (one),
 * `connections` at once, in this process, no HTTP. What a run could at most reach on this Postgres.
 */
const rawPgFloor = async (url: string, connections: number, seconds: number) => {
  const clients = await Promise.all(Array.from({ length: connections }, async () => {
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    return c
  }))
  await clients[0]!.query(`
    CREATE TABLE IF NOT EXISTS bench_workflow_status (
      workflow_uuid text PRIMARY KEY, status text NOT NULL, name text NOT NULL, inputs text, output text,
      created_at bigint NOT NULL, updated_at bigint NOT NULL);
    CREATE TABLE IF NOT EXISTS bench_operation_outputs (
      workflow_uuid text NOT NULL REFERENCES bench_workflow_status (workflow_uuid), function_id int NOT NULL,
      output text, PRIMARY KEY (workflow_uuid, function_id))`)
  let count = 0
  const latencies: Array<number> = []
  const until = performance.now() + seconds * 1000
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < until) {
      const t0 = performance.now()
      const id = randomUUID()
      await c.query(
        `INSERT INTO bench_workflow_status (workflow_uuid, status, name, inputs, created_at, updated_at)
         VALUES ($1, 'PENDING', 'run', $2, $3, $3) ON CONFLICT (workflow_uuid) DO UPDATE SET updated_at = EXCLUDED.updated_at
         RETURNING status`,
        [id, "[\"x\"]", Date.now()]
      )
      await c.query(`SELECT output FROM bench_operation_outputs WHERE workflow_uuid = $1 AND function_id = 0`, [id])
      await c.query(`INSERT INTO bench_operation_outputs (workflow_uuid, function_id, output) VALUES ($1, 0, $2)`, [id, "\"ok x\""])
      await c.query(
        `UPDATE bench_workflow_status SET status = 'SUCCESS', output = $2, updated_at = $3 WHERE workflow_uuid = $1`,
        [id, "\"ok x\"", Date.now()]
      )
      latencies.push(performance.now() - t0)
      count++
    }
  }))
  await Promise.all(clients.map((c) => c.end()))
  latencies.sort((a, b) => a - b)
  return { perSecond: count / seconds, p50: latencies[Math.floor(latencies.length / 2)] ?? NaN }
}

/**
 * A hello world in its own process: `node:http` bare (the GET baseline), or served by the pinned
 * `@effect/platform-node` server with one Effect handler and nothing else (the floor of any route
 * served by the platform, printed as information beside it).
 */
const helloWorld = async (server: "node:http" | "@effect/platform" = "node:http") => {
  const port = await freePort()
  const program = server === "node:http"
    ? `require("node:http").createServer((q, s) => { s.writeHead(200, { "content-type": "application/json" }); s.end('{"hello":"world"}') }).listen(${port}, "127.0.0.1")`
    : `import { HttpServer, HttpServerResponse } from "@effect/platform"
       import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
       import { Effect, Layer } from "effect"
       import { createServer } from "node:http"
       const app = Effect.succeed(HttpServerResponse.unsafeJson({ hello: "world" }))
       NodeRuntime.runMain(Layer.launch(HttpServer.serve(app).pipe(Layer.provide(NodeHttpServer.layer(createServer, { port: ${port}, host: "127.0.0.1" })))))`
  const child = spawn(
    process.execPath,
    server === "node:http" ? ["-e", program] : ["--input-type=module", "-e", program],
    { stdio: "ignore", cwd: new URL("../..", import.meta.url).pathname }
  )
  for (let i = 0; i < 100; i++) {
    if (await fetch(`http://127.0.0.1:${port}/`).then(() => true, () => false)) break
    await new Promise((r) => setTimeout(r, 50))
  }
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill("SIGKILL") }
}

/** A finished run padded to `n` events (sequences 5..n, as a long run has), and the id of event n-60: a page's cursor. */
const paddedRun = async (db: BenchPostgres, service: Service, c: Conversation, n: number) => {
  const res = await json(service.base, "POST", `${c.cell.P}/conversations/${c.id}/runs`, c.cell.key, {
    input: [{ type: "text", text: "x" }]
  })
  const runId = res.data.id as string
  for (let i = 0; i < 100; i++) {
    const [row] = await db.query(`SELECT status FROM runs WHERE id = $1`, [runId])
    if (row!.status === "succeeded") break
    await new Promise((r) => setTimeout(r, 50))
  }
  await db.query(
    `INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
     SELECT $1, g, 'evt_bench_' || $1 || '_' || g, 'run.message', '{"role":"assistant"}'::jsonb, now() FROM generate_series(5, $2) g`,
    [runId, n]
  )
  await db.query(`UPDATE runs SET last_sequence = $2 WHERE id = $1`, [runId, Math.max(n, 4)])
  const [cursor] = await db.query(`SELECT id FROM run_events WHERE run_id = $1 AND sequence = $2`, [runId, Math.max(1, n - 60)])
  return { runId, cursor: cursor!.id as string }
}

/** `count` stored runs more (finished), copied from a run of the cell's, as a long-lived database has. */
const storeRuns = async (db: BenchPostgres, template: string, count: number) => {
  const columns = (await db.query(
    `SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' AND column_name <> 'id' ORDER BY ordinal_position`
  )).map((r) => r.column_name as string)
  for (let done = 0; done < count; done += 100_000) {
    await db.query(
      `INSERT INTO runs (id, ${columns.join(", ")})
       SELECT 'run_bench_' || g, ${columns.map((c) => `t.${c}`).join(", ")}
       FROM generate_series($2::int + 1, $2::int + $3::int) g, (SELECT * FROM runs WHERE id = $1) t`,
      [template, done, Math.min(100_000, count - done)]
    )
  }
  await db.query(`ANALYZE runs`)
}

export const runPathBench = async (options: { readonly quick: boolean; readonly report: Report }) => {
  const { quick, report } = options
  const seconds = quick ? 3 : 8
  const db = await startPostgres()
  let service: Service | undefined
  let dbos: Awaited<ReturnType<typeof startDbos>> | undefined
  try {
    // ---- 0. the peer, alone on the cluster -------------------------------------------------------
    dbos = await startDbos(db)
    const peer = dbos
    // warm: its JIT, its pool (a first C=1 phase was 10-25% slower without)
    await peer.phase(16, quick ? 1 : 2)
    await peer.phase(1, quick ? 1 : 2)
    await measureBackground(db, peer.subject, quick ? 2 : 5)
    const wf1 = await measured(db, peer.subject, () => peer.phase(1, seconds))
    console.log(`  DBOS 5.3, C=1: ${wf1.result.perSecond.toFixed(1)} workflows/s, p50 ${wf1.result.p50.toFixed(2)} ms`)
    printCosts("workflow", wf1.costs)
    const wf16 = await measured(db, peer.subject, () => peer.phase(16, seconds))
    console.log(`  DBOS 5.3, C=16: ${wf16.result.perSecond.toFixed(1)} workflows/s, p50 ${wf16.result.p50.toFixed(2)} ms`)
    printCosts("workflow", wf16.costs)
    await peer.stop()
    dbos = undefined
    const floor1 = await rawPgFloor(db.url, 1, seconds)
    const floor16 = await rawPgFloor(db.url, 16, seconds)
    console.log(
      `  raw pg floor (DBOS's shape by hand, in process): C=1 ${floor1.perSecond.toFixed(1)}/s p50 ${floor1.p50.toFixed(2)} ms;` +
        ` C=16 ${floor16.perSecond.toFixed(1)}/s p50 ${floor16.p50.toFixed(2)} ms`
    )

    service = await startService({
      DATABASE_URL: db.url,
      CELL_RATE_LIMIT_RPS: "1000000",
      CELL_RATE_LIMIT_BURST: "1000000",
      QUOTA_SANDBOX_RUNS_PER_DAY: "100000000",
      QUOTA_SANDBOX_CONCURRENT_RUNS: "100000"
    })
    const svc = service
    console.log(`  service up (pid ${svc.pid})`)
    const cells = await Promise.all(Array.from({ length: CELLS }, (_, i) => provision(svc, i)))
    console.log(`  ${CELLS} cells provisioned; service pid ${svc.pid}, Postgres pid ${db.pid}`)
    await endToEnd(svc, await conversations(db, cells, 20, "warm"), 16, 2)
    const subject: Subject = { name: "service", cpu: () => cpuMs(svc.pid), background: { xids: 0, statements: 0 } }
    await measureBackground(db, subject, quick ? 2 : 5)

    // ---- 1. end to end ---------------------------------------------------------------------
    const pool1 = await conversations(db, cells, quick ? 20 : 40, "e2e1")
    const c1 = await measured(db, subject, () => endToEnd(svc, pool1, 1, seconds))
    console.log(`  end to end, C=1: ${(c1.result.count / seconds).toFixed(1)} runs/s, p50 ${c1.result.result.latency.p50} ms`)
    printCosts("run", c1.costs)
    const pool16 = await conversations(db, cells, quick ? 40 : 80, "e2e16")
    const c16 = await measured(db, subject, () => endToEnd(svc, pool16, 16, seconds))
    const e2e16 = c16.result.count / seconds
    console.log(`  end to end, C=16: ${e2e16.toFixed(1)} runs/s, p50 ${c16.result.result.latency.p50} ms`)
    printCosts("run", c16.costs)
    const dbos16 = wf16.result.perSecond
    report("scripted run end to end, C=16 (DBOS: workflows/s)", e2e16, "runs/s", dbos16, ">= 1.5x DBOS's", e2e16 >= 1.5 * dbos16)
    const p50 = c1.result.result.latency.p50
    report("scripted run end to end, C=1, p50 (DBOS: workflow's)", p50, "ms", wf1.result.p50, "<= DBOS's", p50 <= wf1.result.p50)
    const cpu = c16.costs.node
    report("node CPU per run, C=16 (DBOS: per workflow)", cpu, "ms", wf16.costs.node, "<= 1.5x DBOS's", cpu <= 1.5 * wf16.costs.node)
    const pgCpu = c16.costs.pg
    report("Postgres CPU per run, C=16 (DBOS: per workflow)", pgCpu, "ms", wf16.costs.pg, "<= DBOS's", pgCpu <= wf16.costs.pg)
    const statements = c16.costs.statements
    report("top-level statements per run, C=16 (DBOS: per workflow)", statements, "", wf16.costs.statements, "<= 4", statements <= 4)
    report("write transactions per run, C=16 (DBOS: per workflow)", c16.costs.xids, "", wf16.costs.xids, "information", undefined)
    report("raw pg floor, C=16 (DBOS: workflows/s)", floor16.perSecond, "workflows/s", dbos16, "information: the limit", undefined)

    // ---- 2. admission --------------------------------------------------------------------------
    const fresh = await conversations(db, cells, quick ? 60 : 150, "adm")
    const adm = await measured(db, subject, () => admission(svc, fresh, 16, seconds))
    const admitted = adm.result.count / seconds
    console.log(`  admission (202), C=16: ${admitted.toFixed(1)} runs/s, p50 ${adm.result.result.latency.p50} ms`)
    printCosts("admission (and its run)", adm.costs)
    const insertRate = await inserts(db.url, 16, seconds)
    report("run admission (202), C=16", admitted, "runs/s", insertRate, ">= 0.5x single-row INSERT tx/s", admitted >= 0.5 * insertRate)

    // ---- 3. GET run ----------------------------------------------------------------------------
    const sample = { cell: cells[0]! }
    const runs = await json(svc.base, "GET", `${sample.cell.P}/runs?limit=1`, sample.cell.key).catch(() => undefined)
    const runId = runs?.data?.[0]?.id ??
      (await db.query(`SELECT id FROM runs WHERE tenant_id = $1 ORDER BY id DESC LIMIT 1`, [sample.cell.tenant]))[0]!.id
    const get = await load({
      url: `${svc.base}${sample.cell.P}/runs/${runId}`,
      connections: 16,
      duration: seconds,
      headers: { authorization: `Bearer ${sample.cell.key}` }
    })
    const hello = await helloWorld()
    const bare = await load({ url: hello.url, connections: 16, duration: seconds })
    hello.stop()
    const platformHello = await helloWorld("@effect/platform")
    const platformBare = await load({ url: platformHello.url, connections: 16, duration: seconds })
    platformHello.stop()
    if (get.non2xx > 0) console.log(`    GET run: ${get.non2xx} non-2xx answers`)
    report(
      "GET run, C=16",
      get.requests.average,
      "req/s",
      bare.requests.average,
      ">= 0.3x node:http hello world",
      get.requests.average >= 0.3 * bare.requests.average
    )
    report(
      "@effect/platform-node hello world, C=16",
      platformBare.requests.average,
      "req/s",
      bare.requests.average,
      "information: the floor of a route served by the pinned HTTP server",
      undefined
    )

    // ---- 4. cost stays flat --------------------------------------------------------------------
    const [smallConv, largeConv] = await conversations(db, [sample.cell], 2, "flat")
    const big = quick ? 20_000 : 100_000
    const small = await paddedRun(db, svc, smallConv!, 111)
    const large = await paddedRun(db, svc, largeConv!, big)
    await db.query("ANALYZE run_events")
    const page = (r: { runId: string; cursor: string }) =>
      load({
        url: `${svc.base}${sample.cell.P}/runs/${r.runId}/events?limit=50&cursor=${r.cursor}`,
        connections: 1,
        duration: quick ? 2 : 4,
        headers: { authorization: `Bearer ${sample.cell.key}` }
      })
    const smallPage = await page(small)
    const largePage = await page(large)
    report(
      `events page read (mean), ${big.toLocaleString()} vs 111 events`,
      largePage.latency.mean,
      "ms",
      smallPage.latency.mean,
      "<= 1.2x",
      largePage.latency.mean <= 1.2 * smallPage.latency.mean
    )
    if (!quick) {
      const stored = 1_000_000
      const t0 = performance.now()
      await storeRuns(db, runId, stored)
      console.log(`  ${stored.toLocaleString()} runs stored in ${((performance.now() - t0) / 1000).toFixed(0)} s`)
      const more = await conversations(db, cells, 150, "adm2")
      const after = (await admission(svc, more, 16, seconds)).count / seconds
      report(
        "admission (202), C=16, with 1M stored runs",
        after,
        "runs/s",
        admitted,
        ">= 1/1.2 of the empty database's",
        after >= admitted / 1.2
      )
    }
  } finally {
    await dbos?.stop()
    await service?.stop()
    await db.stop()
  }
}

/** For profiling (scratch): provisions, warms, then one load phase; the window it ran in. */
export const __profile = async <C>(
  db: BenchPostgres,
  svc: Service,
  mode: string,
  counted: () => Promise<C> = async () => undefined as C
) => {
  const cells = await Promise.all(Array.from({ length: CELLS }, (_, i) => provision(svc, i)))
  await endToEnd(svc, await conversations(db, cells, 20, "warm"), 16, 2)
  const pool = await conversations(db, cells, 100, "p")
  const from = Date.now()
  const c = Number(process.env["PROFILE_CONNECTIONS"] ?? 16)
  const subject: Subject = { name: "service", cpu: () => cpuMs(svc.pid), background: { xids: 0, statements: 0 } }
  if (mode === "get") {
    const [{ id: runId, tenant_id }] = await db.query(`SELECT id, tenant_id FROM runs ORDER BY id DESC LIMIT 1`)
    const sample = { cell: cells.find((c) => c.tenant === tenant_id) ?? cells[0]! }
    const before = await counted()
    const got = await measured(db, subject, async () => {
      const r = await load({
        url: `${svc.base}${sample.cell.P}/runs/${runId}`,
        connections: c,
        duration: 10,
        headers: { authorization: `Bearer ${sample.cell.key}` }
      })
      return { count: r.requests.total }
    })
    printCosts("GET", got.costs)
    const after = await counted()
    for (const s of await db.topStatements(10)) console.log(`    ${(s.calls / got.result.count).toFixed(2)} ${s.query.slice(0, 160)}`)
    return { from, to: Date.now(), count: got.result.count, counts: before === undefined ? undefined : { before, after } }
  }
  const before = await counted()
  const m = await measured(db, subject, () => mode === "e2e" ? endToEnd(svc, pool, c, 10) : admission(svc, pool, c, 10))
  // the runs' own work done (their commits and the notifications after them)
  await new Promise((r) => setTimeout(r, 500))
  const after = await counted()
  printCosts("run", m.costs)
  for (const s of await db.topStatements(40)) {
    console.log(`    ${(s.calls / m.result.count).toFixed(2)} ${(s.total_ms / m.result.count).toFixed(3)} ms ${s.query.slice(0, 140)}`)
  }
  return { from, to: Date.now(), count: m.result.count, counts: before === undefined ? undefined : { before, after } }
}
