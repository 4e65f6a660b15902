/**
 * Reads a V8 `.cpuprofile` (e.g. from `BENCH_SERVICE_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR"`)
 * and prints where the service's own time went over the part of the profile after `--from` (a
 * fraction of its length: the load phase, not the start-up), by each sample's own frame:
 *
 *   node --import tsx scripts/bench/cpuprofile.ts FILE [--from=0.45] [--top=40] [--callers=REGEX]
 *
 * - by kind (Effect's runtime, Schema, the Postgres client, socket writes, GC, our code...);
 * - by file (a package's by its path in the package, ours by path);
 * - by function;
 * - with `--callers=REGEX`: the samples inside frames whose URL matches, by their nearest caller
 *   outside those frames and outside Effect's combinators (who asked for the Schema work, say).
 * Shares are of the samples the main thread was busy (idle ones left out).
 */
import * as fs from "node:fs"

interface Frame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}
interface ProfileNode {
  readonly id: number
  readonly callFrame: Frame
  readonly children?: ReadonlyArray<number>
}
interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly startTime: number
  readonly endTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const args = process.argv.slice(2)
const option = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const file = args.find((a) => !a.startsWith("--"))
if (file === undefined) throw new Error("usage: cpuprofile.ts FILE [--from=0.45] [--top=40] [--callers=REGEX]")
const from = Number(option("from") ?? 0.45)
const top = Number(option("top") ?? 40)
const callers = option("callers")

const profile = JSON.parse(fs.readFileSync(file, "utf8")) as Profile
const nodes = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)

const SOCKET_WRITES = new Set(["writev", "writeBuffer", "writeUtf8String", "writeLatin1String"])
const kindOf = ({ functionName, url }: Frame) => {
  if (url === "") {
    if (functionName === "(garbage collector)") return "GC"
    return SOCKET_WRITES.has(functionName) ? "socket writes (system calls)" : "other native"
  }
  if (/node_modules\/effect\/dist\/.*\/(ParseResult|Schema|SchemaAST)\.js/.test(url)) return "Schema"
  if (/node_modules\/effect\//.test(url)) return "Effect's runtime"
  if (/node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-[^/]+|@effect\/sql[^/]*)\//.test(url)) return "Postgres client"
  if (/node_modules\/(@effect\/platform[^/]*|find-my-way-ts)\//.test(url)) return "@effect/platform"
  if (/node_modules\//.test(url)) return "other packages"
  if (url.startsWith("node:")) return "Node core"
  return "our code"
}
const fileOf = ({ functionName, url }: Frame) => {
  if (url === "") return functionName
  const pkg = url.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\/(?:dist\/(?:esm|cjs)\/)?(?:internal\/)?(.*)$/)
  if (pkg !== null) return `${pkg[1]}/${pkg[2]}`
  return url.startsWith("node:") ? url : url.replace(/^.*?\/(dist|src|scripts)\//, "$1/")
}
const functionOf = (frame: Frame) => `${frame.functionName || "(anonymous)"} ${fileOf(frame)}:${frame.lineNumber + 1}`

const cut = profile.startTime + (profile.endTime - profile.startTime) * from
const count = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1)
const byKind = new Map<string, number>()
const byFile = new Map<string, number>()
const byFunction = new Map<string, number>()
const byCaller = new Map<string, number>()
const matches = callers === undefined ? undefined : new RegExp(callers)
const COMBINATORS =
  /node_modules\/effect\/dist\/.*\/(ParseResult|Schema|SchemaAST|Function|Predicate|Option|Either|Array|core|option|either|array)\.js/
let busy = 0
let inside = 0
let t = profile.startTime
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i]!
  if (t < cut) continue
  const node = nodes.get(profile.samples[i]!)!
  if (node.callFrame.functionName === "(idle)") continue
  busy++
  count(byKind, kindOf(node.callFrame))
  count(byFile, fileOf(node.callFrame))
  count(byFunction, functionOf(node.callFrame))
  if (matches === undefined) continue
  let id: number | undefined = node.id
  let within = false
  let caller = "(none)"
  for (; id !== undefined; id = parent.get(id)) {
    const frame = nodes.get(id)!.callFrame
    if (matches.test(frame.url)) within = true
    else if (within && !COMBINATORS.test(frame.url)) {
      caller = functionOf(frame)
      break
    }
  }
  if (within) {
    inside++
    count(byCaller, caller)
  }
}

const print = (title: string, map: Map<string, number>) => {
  console.log(`\n${title}`)
  for (const [key, n] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`${(100 * n / busy).toFixed(1).padStart(6)}%  ${key}`)
  }
}
console.log(`${file}: ${busy} busy samples after ${(from * 100).toFixed(0)}% of the profile`)
print("by kind", byKind)
print("by file", byFile)
print("by function", byFunction)
if (matches !== undefined) print(`frames matching ${callers} (${(100 * inside / busy).toFixed(1)}%), by nearest caller`, byCaller)
