/**
 * One load phase against a service started with a CPU profile (scratch tool for the hot path):
 *
 *   npm run build && BENCH_SERVICE_ENTRY=dist node --import tsx scripts/bench/profile.ts [e2e|admission] DIR
 *
 * then `node --import tsx scripts/bench/cpuprofile.ts DIR/<file>.cpuprofile --from=0.5`.
 */
import * as fs from "node:fs"

import { startService } from "./child.js"
import { startPostgres } from "./pg.js"
import { __profile } from "./runpath.js"

const mode = process.argv[2] ?? "e2e"
const dir = process.argv[3] ?? "/tmp/prof"
fs.mkdirSync(dir, { recursive: true })
if (!process.env["NO_PROF"]) process.env["BENCH_SERVICE_NODE_ARGS"] = `--cpu-prof --cpu-prof-dir=${dir}`
const db = await startPostgres()
const svc = await startService({
  DATABASE_URL: db.url,
  CELL_RATE_LIMIT_RPS: "1000000",
  CELL_RATE_LIMIT_BURST: "1000000",
  QUOTA_SANDBOX_RUNS_PER_DAY: "100000000",
  QUOTA_SANDBOX_CONCURRENT_RUNS: "100000"
})
try {
  const r = await __profile(db, svc, mode)
  console.log(`${r.count} in ${((r.to - r.from) / 1000).toFixed(1)} s`)
} finally {
  await svc.stop()
  await db.stop()
}
process.exit(0)
