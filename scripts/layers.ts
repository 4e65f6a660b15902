/**
 * The layer check (`npm run lint:layers`, run by CI): the folder-level import graph of `src/` must
 * have no cycle, and every import must point down the layers docs/architecture.md describes.
 *
 * A unit is a top-level folder `src/X/` together with its service file `src/X.ts`; the composition
 * roots (`main.ts`, `Api.ts`, `Http.ts`) are left out. Imports are read as text (static `import`
 * and `export ... from`, and dynamic `import()`), relative ones only. Exit 1 on a cycle, on an
 * import that points up, or on a reach-in; the report names the files and imports involved.
 *
 * Front doors (issue 40): from outside a capability, only its `X.ts` (the service and what it
 * chooses to export), `X/Api.ts` (its endpoints) and `X/Queries.ts` (SQL fragments other
 * capabilities compose into their statements) may be imported, type-only imports included. The
 * composition roots, which build every capability's layers and routes, are exempt; so are the
 * imports named in FRONT_DOOR_EXCEPTIONS, each with its reason.
 */
import * as fs from "node:fs"
import * as path from "node:path"

const SRC = path.resolve(import.meta.dirname, "..", "src")
const ROOTS = new Set(["main.ts", "Api.ts", "Http.ts"])

/** The layers, bottom first. A unit may import units of its own layer (without cycles) and of layers below. */
const LAYERS: ReadonlyArray<{ readonly name: string; readonly units: ReadonlyArray<string> }> = [
  { name: "kernel", units: ["Kernel", "Observability"] },
  { name: "domain", units: ["Domain"] },
  { name: "configuration", units: ["Config"] },
  { name: "infrastructure", units: ["Database", "Crypto", "Outbound"] },
  { name: "cell protocol", units: ["Cells"] },
  {
    name: "capabilities",
    units: [
      "Platform",
      "EnvironmentSettings",
      "ActorSessions",
      "Agents",
      "Models",
      "Tools",
      "Approvals",
      "Runs",
      "Usage",
      "Quotas",
      "Audit",
      "Webhooks",
      "Schedules",
      "Files",
      "Memory",
      "Operator",
      "ProductionRequests",
      "System",
      "Console"
    ]
  },
  { name: "runtime", units: ["Runtime"] },
  { name: "edge", units: ["Edge"] },
  { name: "clients", units: ["Client"] }
]
/** The capabilities whose insides others may not import (scripts/layers.ts's front-door rule). */
const CAPABILITIES = new Set(LAYERS.find((l) => l.name === "capabilities")!.units)

/** `importer -> imported` (paths under src/) allowed past a front door, and why. Keep it short. */
const FRONT_DOOR_EXCEPTIONS: ReadonlyMap<string, string> = new Map([])

/** Units that stand apart: they import nothing of the service and nothing of it imports them. */
const APART = new Set(["ToolServer"])

const files = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : []
  )

const unitOf = (file: string): string | undefined => {
  const rel = path.relative(SRC, file)
  if (rel.startsWith("..")) return undefined
  const [first, ...rest] = rel.split(path.sep)
  if (rest.length === 0) return ROOTS.has(first!) ? undefined : first!.replace(/\.ts$/, "")
  return first
}

const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g

interface Edge {
  readonly from: string
  readonly to: string
  readonly file: string
  readonly target: string
}
const edges: Array<Edge> = []
for (const file of files(SRC)) {
  const from = unitOf(file)
  if (from === undefined) continue
  const text = fs.readFileSync(file, "utf8")
  for (const m of text.matchAll(IMPORT)) {
    const spec = (m[1] ?? m[2])!
    const target = path.resolve(path.dirname(file), spec).replace(/\.js$/, ".ts")
    const to = unitOf(target)
    if (to === undefined || to === from) continue
    edges.push({ from, to, file: path.relative(SRC, file), target: path.relative(SRC, target) })
  }
}

const units = new Set(edges.flatMap((e) => [e.from, e.to]))
for (const f of files(SRC)) {
  const u = unitOf(f)
  if (u !== undefined) units.add(u)
}
const rank = new Map<string, number>()
LAYERS.forEach((layer, i) => layer.units.forEach((u) => rank.set(u, i)))

const problems: Array<string> = []
for (const u of units) {
  if (!rank.has(u) && !APART.has(u)) problems.push(`${u}: not placed in any layer (add it to LAYERS in scripts/layers.ts)`)
}

// Imports that point up, or into or out of a unit that stands apart.
for (const e of edges) {
  if (APART.has(e.from) || APART.has(e.to)) {
    problems.push(`${e.file} imports ${e.target}: ${APART.has(e.from) ? e.from : e.to} stands apart`)
    continue
  }
  const a = rank.get(e.from)
  const b = rank.get(e.to)
  if (a !== undefined && b !== undefined && b > a) {
    problems.push(`${e.file} imports ${e.target}: ${LAYERS[a]!.name} (${e.from}) must not import ${LAYERS[b]!.name} (${e.to})`)
  }
}

// Reach-ins: an import of a capability's file other than its front doors.
for (const e of edges) {
  if (!CAPABILITIES.has(e.to)) continue
  const doors = [`${e.to}.ts`, path.join(e.to, "Api.ts"), path.join(e.to, "Queries.ts")]
  if (doors.includes(e.target) || FRONT_DOOR_EXCEPTIONS.has(`${e.file} -> ${e.target}`)) continue
  problems.push(
    `${e.file} imports ${e.target}: outside ${e.to}, import only its front doors (${doors.join(", ")}); ` +
      `export what is needed from ${e.to}.ts, or put the SQL fragment in ${e.to}/Queries.ts`
  )
}

// Strongly connected components of the unit graph (Tarjan).
const adjacent = new Map<string, Set<string>>()
for (const e of edges) {
  if (!adjacent.has(e.from)) adjacent.set(e.from, new Set())
  adjacent.get(e.from)!.add(e.to)
}
let counter = 0
const index = new Map<string, number>()
const low = new Map<string, number>()
const stack: Array<string> = []
const onStack = new Set<string>()
const cycles: Array<Array<string>> = []
const connect = (v: string) => {
  index.set(v, counter)
  low.set(v, counter)
  counter++
  stack.push(v)
  onStack.add(v)
  for (const w of adjacent.get(v) ?? []) {
    if (!index.has(w)) {
      connect(w)
      low.set(v, Math.min(low.get(v)!, low.get(w)!))
    } else if (onStack.has(w)) {
      low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
  }
  if (low.get(v) === index.get(v)) {
    const component: Array<string> = []
    let w: string
    do {
      w = stack.pop()!
      onStack.delete(w)
      component.push(w)
    } while (w !== v)
    if (component.length > 1) cycles.push(component.sort())
  }
}
for (const u of [...units].sort()) if (!index.has(u)) connect(u)

for (const cycle of cycles) {
  const inside = new Set(cycle)
  const links = edges.filter((e) => inside.has(e.from) && inside.has(e.to)).map((e) => `    ${e.file} -> ${e.target}`)
  problems.push(`cycle among ${cycle.join(", ")}:\n${[...new Set(links)].join("\n")}`)
}

const units_ = [...units].sort()
console.log(`${units_.length} units, ${new Set(edges.map((e) => `${e.from}>${e.to}`)).size} unit-level imports, ${cycles.length} cycles`)
if (problems.length > 0) {
  console.error(problems.join("\n"))
  process.exit(1)
}
