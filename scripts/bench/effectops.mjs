/**
 * Counts the Effect instructions and fibers of a service process (scratch tool for the hot path,
 * issue 37): preloaded into the service (`BENCH_SERVICE_NODE_ARGS="--import <this file>"`), it
 * wraps each instruction handler of Effect's fiber runtime (the methods its run loop dispatches to
 * by op code) and the start of each fiber with a counter, and on SIGUSR2 writes the counts so far
 * to `$EFFECT_OPS_FILE` (JSON: `{ ops, fibers, byOp }`). Effect is the service's own copy (its
 * directory's `node_modules`, the ESM build). `scripts/bench/profile.ts` uses it with
 * `EFFECT_OPS=1`: the counts of its measured phase, per run.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const Effect = await import(pathToFileURL(path.resolve("node_modules/effect/dist/esm/Effect.js")).href)
const proto = Object.getPrototypeOf(Effect.runSync(Effect.withFiberRuntime((fiber) => Effect.succeed(fiber))))
const counts = { ops: 0, fibers: 0, byOp: {} }
const OPS = [
  "Async",
  "Commit",
  "Failure",
  "OnFailure",
  "OnSuccess",
  "OnSuccessAndFailure",
  "Success",
  "Sync",
  "Tag",
  "UpdateRuntimeFlags",
  "While",
  "Iterator",
  "WithRuntime",
  "Yield",
  "RevertFlags",
  "Some",
  "None",
  "Left",
  "Right"
]
for (const op of OPS) {
  const original = proto[op]
  if (typeof original !== "function") continue
  counts.byOp[op] = 0
  proto[op] = function(...args) {
    counts.ops++
    counts.byOp[op]++
    return original.apply(this, args)
  }
}
for (const start of ["start", "startFork"]) {
  const original = proto[start]
  proto[start] = function(...args) {
    counts.fibers++
    return original.apply(this, args)
  }
}
process.on("SIGUSR2", () => {
  fs.writeFileSync(process.env["EFFECT_OPS_FILE"] ?? "/tmp/effect-ops.json", JSON.stringify(counts))
})
