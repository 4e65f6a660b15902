/**
 * The run-path bench's durable-execution peer (issue 37): DBOS 5.3 (`@dbos-inc/dbos-sdk`) in its
 * own process, on the bench's Postgres. A workflow of one step and a result, started with
 * `DBOS.startWorkflow` and awaited with `getResult()`, `connections` of them in flight at once in
 * a closed loop: start (its `workflow_status` row), one step (its `operation_outputs` row), the
 * result. DBOS's defaults otherwise (its pool of 10 connections, LISTEN/NOTIFY on).
 *
 *   node --import tsx scripts/bench/dbos.ts SYSTEM_DATABASE_URL
 *
 * Commanded over stdin, answering over stdout, one JSON object a line (DBOS's own log lines are
 * not JSON objects with `bench`):
 *   -> {"bench":"ready"}                                      once launched
 *   <- {"connections":16,"seconds":3}                         a closed loop of 16 for 3 s
 *   -> {"bench":"phase","count":N,"ms":T,"p50":P,"cpuMs":C}  workflows done, elapsed ms, p50 ms,
 *                                                             this process's CPU over the phase
 *   stdin closed: shuts DBOS down and exits.
 * Between phases it idles: what it does then is DBOS's background (its queue and schedule polls).
 */
import { DBOS } from "@dbos-inc/dbos-sdk"
import * as readline from "node:readline"

import { quantile } from "./child.js"

const url = process.argv[2]
if (url === undefined) throw new Error("usage: dbos.ts SYSTEM_DATABASE_URL")

const say = (message: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(message)}\n`)

/** The scripted revision's one step: its reply to the input. */
const reply = DBOS.registerStep(async (input: string) => `ok ${input}`, { name: "reply" })
const run = DBOS.registerWorkflow(async (input: string) => reply(input), { name: "run" })

const cpuMs = (since: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1000
}

const phase = async (connections: number, seconds: number) => {
  const latencies: Array<number> = []
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const until = t0 + seconds * 1000
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < until) {
      const started = performance.now()
      const handle = await DBOS.startWorkflow(run)("x")
      const result = await handle.getResult()
      if (result !== "ok x") throw new Error(`unexpected result: ${String(result)}`)
      latencies.push(performance.now() - started)
    }
  }))
  const ms = performance.now() - t0
  return { bench: "phase", count: latencies.length, ms, p50: quantile(latencies, 0.5), cpuMs: cpuMs(cpu0) }
}

DBOS.setConfig({ name: "bench", systemDatabaseUrl: url, logLevel: "error" })
await DBOS.launch()
say({ bench: "ready" })

for await (const line of readline.createInterface({ input: process.stdin })) {
  const command = JSON.parse(line) as { readonly connections: number; readonly seconds: number }
  say(await phase(command.connections, command.seconds))
}
await DBOS.shutdown()
process.exit(0)
