/**
 * Counts the Effect instructions and fibers of a service process (scratch tool for the hot path,
 * issue 37): preloaded into the service (`BENCH_SERVICE_NODE_ARGS="--import <this file>"`), it
 * wraps each instruction handler of Effect's fiber runtime (the methods its run loop dispatches to
 * by op code) and the start of each fiber with a counter, and on SIGUSR2 writes the counts so far
 * to `$EFFECT_OPS_FILE` (JSON: `{ ops, fibers, byOp, sites }`). Effect is the service's own copy (its
 * directory's `node_modules`, the ESM build). `scripts/bench/profile.ts` uses it with
 * `EFFECT_OPS=1`: the counts of its measured phase, per run.
 *
 * With `EFFECT_OPS_SITES=1`, also by site: each instruction named by what it runs (the source of
 * its function's first characters, a Tag's key, a FiberRef set by name), the counts since the
 * previous signal (so the measured phase's): where the instructions come from.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const Effect = await import(pathToFileURL(path.resolve("node_modules/effect/dist/esm/Effect.js")).href)
const proto = Object.getPrototypeOf(Effect.runSync(Effect.withFiberRuntime((fiber) => Effect.succeed(fiber))))
const counts = { ops: 0, fibers: 0, byOp: {} }
const sites = process.env["EFFECT_OPS_SITES"] ? new Map() : undefined
const textOf = (f) => String(f).slice(0, 110).replace(/\s+/g, " ")
/** What an instruction runs, as a site's name. */
const siteOf = (op, e) => {
  if (op === "Tag") return `Tag ${e.key}`
  if (op === "Commit") return `Commit ${textOf(e.commit)}`
  if (op === "UpdateRuntimeFlags") return `UpdateRuntimeFlags ${textOf(e.effect_instruction_i1)}`
  const f = op.startsWith("On") ? (e.effect_instruction_i1 ?? e.effect_instruction_i2) : e.effect_instruction_i0
  return typeof f === "function" ? `${op} ${textOf(f)}` : op
}
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
    if (sites !== undefined) {
      const site = siteOf(op, args[0])
      sites.set(site, (sites.get(site) ?? 0) + 1)
    }
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
if (sites !== undefined) {
  const FiberRef = await import(pathToFileURL(path.resolve("node_modules/effect/dist/esm/FiberRef.js")).href)
  const names = new Map(
    Object.entries(FiberRef).filter(([, v]) => v !== null && typeof v === "object" && "initial" in v).map(([k, v]) => [v, k])
  )
  const set = proto.setFiberRef
  proto.setFiberRef = function(ref, value) {
    const site = `setFiberRef ${names.get(ref) ?? `(initial ${textOf(ref.initial).slice(0, 40)})`}`
    sites.set(site, (sites.get(site) ?? 0) + 1)
    return set.call(this, ref, value)
  }
}
process.on("SIGUSR2", () => {
  const top = sites === undefined ? undefined : Object.fromEntries([...sites].sort((a, b) => b[1] - a[1]).slice(0, 120))
  sites?.clear()
  fs.writeFileSync(process.env["EFFECT_OPS_FILE"] ?? "/tmp/effect-ops.json", JSON.stringify({ ...counts, sites: top }))
})
