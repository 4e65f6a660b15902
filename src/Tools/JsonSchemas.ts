/**
 * Customer JSON Schemas (tool `input_schema` / `output_schema`, JSON Schema 2020-12), isolated per
 * schema and bounded in time (D19). A registered schema must itself be valid: checked against the
 * 2020-12 meta-schema and compiled in strict mode, so unknown keywords and typos are refused at
 * registration; every invocation body and every result is validated against the registered
 * schemas. The checks themselves are in `SchemaCheck.ts`; this file runs them off the main thread.
 *
 * Isolation: every schema is compiled in its own, fresh ajv instance that knows no other schema
 * (not even the meta-schemas), so `$ref` reaches only inside the schema itself (`#...` pointers,
 * `$defs`, its own `$id`/`$anchor`s) and anything else fails to compile; a `$id` means nothing
 * outside its schema, so two tenants' equal `$id`s neither collide nor see each other. `$schema`
 * may name only the 2020-12 meta-schema.
 *
 * Time: `pattern` and `patternProperties` run on RE2 (re2js, linear in the input), never on V8's
 * backtracking RegExp; backreferences and lookarounds are refused at registration (RE2 corners:
 * `\s` is ASCII whitespace only, `.` excludes only `\n`). `uniqueItems` is linear (a Map keyed by
 * each item's canonical JSON: 20,000 small objects in well under a second, not 12 s pairwise).
 * Formats are not validated, and inputs are size-limited before they get here (request bodies and
 * tool answers 1 MiB). Other shapes stay super-linear, e.g. applicators over a recursive `$ref`
 * (`items: { anyOf: [{ $ref: "#" }, { $ref: "#" }] }` is exponential in the input's nesting), so:
 *
 * THE BOUND: every check runs in a worker thread (`SchemaWorker.ts`; a pool of `POOL_SIZE` = 2,
 * one request at a time each) with a deadline of `DEADLINE_MS` = 1000 ms of CPU, counted from
 * when the request reaches a ready worker (compiling a schema the worker lacks counts), and at
 * most `WALL_CAP_MS` = 3000 ms of wall time. Node 20 cannot read one thread's CPU time, so the
 * process's CPU over the check stands for the worker's (an upper bound: the worker cannot have
 * used more): at 1000 ms of wall time, a check during which the process used less than 1000 ms
 * of CPU was starved by other work on the machine, not slow, and is given what is left (see
 * `overdue`). A hostile schema burns CPU and is cut at about 1000 ms; an ordinary one on a
 * machine busy with other processes is not refused for the machine's load. Past the deadline
 * the worker is terminated, a new one takes its place, and the answer is the problem
 * "validation took longer than 1000 ms" (at registration: "checking the schema took longer than
 * 1000 ms"), which callers treat as invalid: a tool error the agent sees, or 400
 * `invalid_json_schema`. The main thread never runs a customer schema, so it stays responsive;
 * what a caller can still wait for beyond its own deadline is the queue: requests that find both
 * workers busy wait their turn (each turn at most 3000 ms). The deadline is a constant, not
 * operator configuration. An ordinary small input costs one message round trip more than running
 * in-thread (measured: about 70 µs more at the median for a 1 KB object); the first check also
 * waits for a worker to load (about 0.2 s compiled, 1 s under tsx), which the deadline excludes.
 *
 * Memory: each worker keeps compiled validators in a bounded LRU (`CACHE_LIMIT`) under a key the
 * caller gives, the tool id and which schema (`tool_...:input`); tools are immutable, so a key
 * never changes meaning, and the schema is sent to a worker only when it does not have the key.
 * Registration checks compile in a throwaway instance and cache nothing. A terminated worker
 * takes its cache with it.
 *
 * Loading: compiled, the worker is `SchemaWorker.js` next to this file. Under tsx or vitest this
 * file is TypeScript, and Node 20 ignores loaders given in a worker's `execArgv`, so the worker
 * starts from a few lines that register tsx's ESM hooks and then import `SchemaWorker.ts`.
 */
import { Effect } from "effect"
import { createRequire } from "node:module"
import { pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"

import type { Data, Op, Reply } from "./SchemaWorker.js"

/** How much CPU one validation, or one registration check, may take in its worker. */
export const DEADLINE_MS = 1000

/** ... and how much wall time, however starved it was. */
export const WALL_CAP_MS = 3000

/**
 * At a check's timer: `undefined` when it is overdue (terminate it), else how much longer it may
 * run. `cpuMs` is the process's CPU since the check started (an upper bound of the worker's).
 */
export const overdue = (wallMs: number, cpuMs: number): number | undefined => {
  if (cpuMs >= DEADLINE_MS || wallMs >= WALL_CAP_MS) return undefined
  return Math.max(10, Math.min(DEADLINE_MS - cpuMs, WALL_CAP_MS - wallMs))
}

/** How many compiled validators a worker keeps; the least recently used is evicted beyond it. */
export const CACHE_LIMIT = 1000

/** This many workers: one starts at the first check, the next once it is ready; an ended one is replaced. */
const POOL_SIZE = 2

/** A worker that has not loaded within this long is given up. */
const STARTUP_MS = 30_000

const message = (e: unknown) => (e instanceof Error ? e.message : String(e))

type Answer = { readonly problem?: string; readonly size?: number }

interface Job {
  readonly op: Op
  /** The problem answered past the deadline. */
  readonly late: string
  readonly finish: (answer: Answer) => void
}

interface Slot {
  readonly worker: Worker
  ready: boolean
  job: Job | undefined
  id: number
  timer: ReturnType<typeof setTimeout> | undefined
  /** The keys this worker has compiled, in its LRU order (mirrors its cache; `missing` corrects it). */
  readonly known: Map<string, true>
}

const slots: Array<Slot> = []
const queue: Array<Job> = []
let lastId = 0

/**
 * tsx's ESM API as an import would resolve it (its `import` export; the `require` one computes
 * its hooks' path wrongly). `import.meta.resolve` would do, but vitest does not provide it.
 */
const tsxApi = (here: string): string => {
  const require = createRequire(here)
  const manifest = require.resolve("tsx/package.json")
  const { exports } = require(manifest) as { exports: Record<string, { import: { default: string } }> }
  return new URL(exports["./esm/api"]!.import.default, pathToFileURL(manifest)).href
}

const start = (): Worker => {
  const here = import.meta.url
  const workerData: Data = { cacheLimit: CACHE_LIMIT }
  if (!here.endsWith(".ts")) return new Worker(new URL("./SchemaWorker.js", here), { workerData })
  const [api, entry] = [tsxApi(here), new URL("./SchemaWorker.ts", here).href].map((url) => JSON.stringify(url))
  const boot = `import(${api}).then((tsx) => { tsx.register(); return import(${entry}) })`
  // execArgv: [] so that a `--import tsx` of the parent is not registered a second time.
  return new Worker(boot, { eval: true, execArgv: [], workerData })
}

const spawn = (): void => {
  if (slots.length >= POOL_SIZE) return
  const slot: Slot = { worker: start(), ready: false, job: undefined, id: 0, timer: undefined, known: new Map() }
  slot.timer = setTimeout(() => retire(slot, `the schema worker did not start within ${STARTUP_MS} ms`), STARTUP_MS).unref()
  slot.worker.on("message", (reply: Reply) => receive(slot, reply))
  slot.worker.on("error", (e) => retire(slot, `validation failed: ${message(e)}`))
  slot.worker.on("exit", (code) => retire(slot, `validation failed: the schema worker exited (${code})`))
  slots.push(slot)
}

/**
 * Ends a worker for good: its job is answered with `problem`; if it never loaded and no worker
 * has, the waiting jobs are too (rather than starting workers that fail in a loop).
 */
const retire = (slot: Slot, problem: string): void => {
  const at = slots.indexOf(slot)
  if (at < 0) return
  slots.splice(at, 1)
  clearTimeout(slot.timer)
  void slot.worker.terminate()
  const failed = slot.job === undefined ? [] : [slot.job]
  if (!slot.ready && !slots.some((s) => s.ready)) failed.push(...queue.splice(0))
  for (const job of failed) job.finish({ problem })
  pump()
}

const remember = (known: Map<string, true>, key: string): void => {
  known.delete(key)
  known.set(key, true)
  if (known.size > CACHE_LIMIT) known.delete(known.keys().next().value!)
}

const dispatch = (slot: Slot, job: Job): void => {
  let op = job.op
  if (op.op === "validate") {
    if (slot.known.has(op.key)) op = { op: "validate", key: op.key, value: op.value }
    remember(slot.known, op.key)
  }
  slot.job = job
  slot.id = ++lastId
  const startedAt = performance.now()
  const cpuAt = process.cpuUsage()
  const check = () => {
    const cpu = process.cpuUsage(cpuAt)
    const more = overdue(performance.now() - startedAt, (cpu.user + cpu.system) / 1000)
    if (more !== undefined) {
      slot.timer = setTimeout(check, more)
      return
    }
    retire(slot, job.late)
    spawn() // its replacement, warm for the next check
  }
  slot.timer = setTimeout(check, DEADLINE_MS)
  try {
    slot.worker.postMessage({ ...op, id: slot.id })
  } catch (e) {
    // Not cloneable (only values that are not JSON): nothing was sent.
    clearTimeout(slot.timer)
    slot.job = undefined
    job.finish({ problem: `the value cannot be validated: ${message(e)}` })
  }
}

const receive = (slot: Slot, reply: Reply): void => {
  if (!slots.includes(slot)) return // retired: its job was answered already
  if ("ready" in reply) {
    slot.ready = true
    clearTimeout(slot.timer)
    spawn() // the next of the pool, if any
    return pump()
  }
  const job = slot.job
  if (job === undefined || reply.id !== slot.id) return
  clearTimeout(slot.timer)
  slot.job = undefined
  if (reply.missing === true && job.op.op === "validate") {
    slot.known.delete(job.op.key)
    return dispatch(slot, job)
  }
  job.finish(reply)
  pump()
}

/** Hands waiting jobs to idle workers (preferring one that has the key), starting workers as needed. */
const pump = (): void => {
  if (queue.length > 0 && slots.every((s) => s.ready)) spawn() // one starting at a time: none slows another
  while (queue.length > 0) {
    const idle = slots.filter((s) => s.ready && s.job === undefined)
    if (idle.length === 0) break
    const job = queue.shift()!
    const key = job.op.op === "validate" ? job.op.key : undefined
    dispatch(idle.find((s) => key !== undefined && s.known.has(key)) ?? idle[0]!, job)
  }
  // A worker keeps the process alive only while something waits for it.
  for (const s of slots) {
    if (s.job !== undefined || (!s.ready && queue.length > 0)) s.worker.ref()
    else s.worker.unref()
  }
}

/** Runs one request in a worker; interrupting the caller drops it if it has not started. */
const run = (op: Op, late: string): Effect.Effect<Answer> =>
  Effect.async<Answer>((resume) => {
    let done = false
    const job: Job = {
      op,
      late,
      finish: (answer) => {
        if (done) return
        done = true
        resume(Effect.succeed(answer))
      }
    }
    queue.push(job)
    pump()
    return Effect.sync(() => {
      done = true
      const at = queue.indexOf(job)
      if (at >= 0) queue.splice(at, 1)
    })
  })

/** Why a registered schema is not acceptable, or undefined when it is. Caches nothing. */
export const schemaProblem = (schema: unknown): Effect.Effect<string | undefined> =>
  Effect.map(run({ op: "check", schema }, `checking the schema took longer than ${DEADLINE_MS} ms`), (a) => a.problem)

/**
 * Validates `value` against a registered schema: undefined when valid, else the first problem.
 * `key` names the schema for good (e.g. `${tool.id}:input`): the validator compiled for it is reused.
 */
export const validate = (key: string, schema: object, value: unknown): Effect.Effect<string | undefined> =>
  Effect.map(run({ op: "validate", key, schema, value }, `validation took longer than ${DEADLINE_MS} ms`), (a) => a.problem)

/** How many compiled validators the first idle worker has cached (at most `CACHE_LIMIT`). */
export const cacheSize: Effect.Effect<number> = Effect.map(
  run({ op: "size" }, `counting the cache took longer than ${DEADLINE_MS} ms`),
  (a) => a.size ?? 0
)
