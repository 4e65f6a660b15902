/**
 * `npm run bench` (issue 20): the run path's targets, out of process, each printed as the figure,
 * the baseline measured in the same run on the same machine and Postgres, the ratio and whether the
 * target is met, then as one table. These machines are shared and noisy: read ratios and per-run
 * costs, not absolutes.
 *
 *   npm run bench               # the whole set, on the compiled build (`npm run build` first: what `npm start` runs)
 *   npm run bench -- --quick    # shorter phases and fewer streams, on the sources (tsx): under 2 minutes
 *
 * scripts/bench/runpath.ts: scripted runs end to end against DBOS 5.3 (scripts/bench/dbos.ts, its
 * own process), admission, GET run, per-run CPU, statements and write transactions, cost flat as
 * the data grows. scripts/bench/streams.ts: SSE latency with
 * 1,000 streams and memory per idle stream with 10,000. `npm run bench:inprocess` keeps the
 * earlier in-process set; bench:bodies and bench:files measure the body limits and files,
 * bench:webhooks the fairness of webhook deliveries across environments (D20).
 */
import { execFileSync } from "node:child_process"

import { type Report, runPathBench } from "./runpath.js"
import { streamsBench } from "./streams.js"

const quick = process.argv.includes("--quick")
const rows: Array<Array<string>> = []

const report: Report = (name, figure, unit, baseline, target, met) => {
  rows.push([
    name,
    `${figure.toFixed(2)} ${unit}`.trim(),
    `${baseline.toFixed(2)} ${unit}`.trim(),
    (figure / baseline).toFixed(2),
    target,
    met === undefined ? "-" : met ? "yes" : "NO"
  ])
  console.log(
    `  ${name}: ${figure.toFixed(2)} ${unit} (baseline ${baseline.toFixed(2)}, ratio ${(figure / baseline).toFixed(2)}) -> ${
      met === undefined ? "information" : met ? "met" : "NOT met"
    }`
  )
}

const started = performance.now()
if (!quick && process.env["BENCH_SERVICE_ENTRY"] === undefined) {
  console.log("building (npm run build)...")
  execFileSync("npm", ["run", "build"], { stdio: "ignore" })
  process.env["BENCH_SERVICE_ENTRY"] = "dist"
}
console.log(`run path${quick ? " (--quick)" : ""}:`)
await runPathBench({ quick, report })
console.log(`streams${quick ? " (--quick)" : ""}:`)
await streamsBench({ quick, report })

const header = ["target", "figure", "baseline", "ratio", "wanted", "met"]
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
const line = (cells: ReadonlyArray<string>) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`
console.log(`\n${line(header)}\n| ${widths.map((w) => "-".repeat(w)).join(" | ")} |\n${rows.map(line).join("\n")}`)
console.log(`\n${quick ? "quick " : ""}bench done in ${((performance.now() - started) / 1000).toFixed(0)} s`)
// the load generator's and the streams' sockets may keep the loop alive for a while: done is done
process.exit(0)
