/**
 * One load phase against a service started with a CPU profile (scratch tool for the hot path):
 *
 *   npm run build && BENCH_SERVICE_ENTRY=dist node --import tsx scripts/bench/profile.ts [e2e|admission] DIR
 *
 * then `node --import tsx scripts/bench/cpuprofile.ts DIR/<file>.cpuprofile --from=0.5`.
 *
 * `NO_PROF=1`: no profile. `EFFECT_OPS=1` (with NO_PROF): the Effect instructions and fibers of
 * the measured phase, per run (scripts/bench/effectops.mjs); with `EFFECT_OPS_SITES=1` also the
 * 40 sites that ran the most of them, per run. `PROFILE_CONNECTIONS=N`: the load's
 * concurrency (16). `BENCH_SERVICE_DIR`: another checkout's build (an A/B pair).
 */
import * as fs from "node:fs"

import { startService } from "./child.js"
import { startPostgres } from "./pg.js"
import { __profile } from "./runpath.js"

const mode = process.argv[2] ?? "e2e"
const dir = process.argv[3] ?? "/tmp/prof"
fs.mkdirSync(dir, { recursive: true })
if (!process.env["NO_PROF"]) process.env["BENCH_SERVICE_NODE_ARGS"] = `--cpu-prof --cpu-prof-dir=${dir}`
const opsFile = `${dir}/effect-ops.json`
if (process.env["EFFECT_OPS"]) {
  process.env["BENCH_SERVICE_NODE_ARGS"] = `--import ${new URL("effectops.mjs", import.meta.url).pathname}`
  process.env["EFFECT_OPS_FILE"] = opsFile
}
const db = await startPostgres()
const svc = await startService({
  DATABASE_URL: db.url,
  CELL_RATE_LIMIT_RPS: "1000000",
  CELL_RATE_LIMIT_BURST: "1000000",
  QUOTA_SANDBOX_RUNS_PER_DAY: "100000000",
  QUOTA_SANDBOX_CONCURRENT_RUNS: "100000"
})
try {
  const counted = async () => {
    if (!process.env["EFFECT_OPS"]) return undefined
    fs.rmSync(opsFile, { force: true })
    process.kill(svc.pid, "SIGUSR2")
    for (let i = 0; i < 50 && !fs.existsSync(opsFile); i++) await new Promise((r) => setTimeout(r, 20))
    return JSON.parse(fs.readFileSync(opsFile, "utf8")) as {
      ops: number
      fibers: number
      byOp: Record<string, number>
      sites?: Record<string, number>
    }
  }
  const r = await __profile(db, svc, mode, counted)
  console.log(`${r.count} in ${((r.to - r.from) / 1000).toFixed(1)} s`)
  if (r.counts?.after !== undefined && r.counts.before !== undefined) {
    const { after, before } = r.counts
    const per = (n: number) => (n / r.count).toFixed(1)
    console.log(`Effect per run: ${per(after.ops - before.ops)} instructions, ${per(after.fibers - before.fibers)} fibers`)
    const byOp = Object.entries(after.byOp).map(([op, n]) => [op, n - (before.byOp[op] ?? 0)] as const).sort((a, b) => b[1] - a[1])
    console.log(`  by op: ${byOp.filter(([, n]) => n > 0).map(([op, n]) => `${op} ${per(n)}`).join(", ")}`)
    // the sites' counts are since the previous signal: the measured phase's
    for (const [site, n] of Object.entries(after.sites ?? {}).slice(0, 40)) console.log(`  ${per(n).padStart(7)}  ${site}`)
  }
} finally {
  await svc.stop()
  await db.stop()
}
process.exit(0)
