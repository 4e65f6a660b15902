/**
 * Customer JSON Schemas are isolated per tool schema and bounded in time (D19): each compiles in
 * its own ajv instance, so `$ref` reaches only inside the schema and `$id` means nothing outside
 * it; `pattern` runs on RE2 (linear time), and a pattern RE2 cannot express is refused at
 * registration; `uniqueItems` is linear; every check runs in a worker thread with a 1 s deadline,
 * so super-linear shapes answer a problem in time while the main thread keeps ticking; compiled
 * validators live in a bounded LRU. Unit tests of `src/Tools/JsonSchemas.ts`, no server.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"

import { CACHE_LIMIT, cacheSize, DEADLINE_MS, overdue, schemaProblem, validate, WALL_CAP_MS } from "../src/Tools/JsonSchemas.js"

const timed = <A>(effect: Effect.Effect<A>) =>
  Effect.gen(function*() {
    const start = performance.now()
    const result = yield* effect
    return [result, performance.now() - start] as const
  })

/** Runs a check while a 10 ms sleep ticks alongside: its answer, how long it took, when the sleep ended. */
const alongside = (check: Effect.Effect<string | undefined>) =>
  Effect.gen(function*() {
    const start = performance.now()
    const ticker = yield* Effect.fork(Effect.map(Effect.sleep(10), () => performance.now() - start))
    const problem = yield* check
    const took = performance.now() - start
    return { problem, took, tick: yield* Fiber.join(ticker) }
  })

/** `items: { anyOf: [$ref #, $ref #] }`: each level tries both branches, so 2^depth attempts. */
const recursive = { type: "array", items: { anyOf: [{ $ref: "#" }, { $ref: "#" }] } }
const nested = (depth: number) => {
  let value: unknown = 1
  for (let i = 0; i < depth; i++) value = [value]
  return value
}

describe("customer JSON Schemas (D19)", () => {
  // The first worker loads tsx, ajv and re2js (about a second under tsx); no test should time that.
  beforeAll(() => Effect.runPromise(validate("warm:input", { type: "string" }, "x")))

  it.live("pattern runs in linear time: ^(a|aa)+$ against 40 a's and a b is refused within milliseconds", () =>
    Effect.gen(function*() {
      const schema = { type: "string", pattern: "^(a|aa)+$" }
      expect(yield* schemaProblem(schema)).toBeUndefined()
      const [problem, ms] = yield* timed(validate("redos:input", schema, "a".repeat(40) + "b"))
      expect(problem).toMatch(/must match pattern/)
      expect(ms).toBeLessThan(200)
      expect(yield* validate("redos:input", schema, "a".repeat(41))).toBeUndefined()
    }))

  it.live("a pattern property overlapping a named property costs no backtracking at registration", () =>
    Effect.gen(function*() {
      const schema = { type: "object", properties: { ["a".repeat(40) + "b"]: {} }, patternProperties: { "^(a|aa)+$": {} } }
      const [problem, ms] = yield* timed(schemaProblem(schema))
      expect(problem).toBeUndefined()
      expect(ms).toBeLessThan(200)
    }))

  it.live("a schema cannot $ref another tool's schema by its $id", () =>
    Effect.gen(function*() {
      const a = { $id: "https://example.com/a", type: "string", minLength: 3 }
      expect(yield* schemaProblem(a)).toBeUndefined()
      expect(yield* validate("conn1:input", a, "abc")).toBeUndefined()
      const b = { $ref: "https://example.com/a" }
      expect(yield* schemaProblem(b)).toMatch(/https:\/\/example\.com\/a/)
      // A tool stored before this rule: its schema no longer compiles, so nothing validates against it.
      expect(yield* validate("conn2:input", b, "abc")).toMatch(/cannot be compiled/)
    }))

  it.live("$ref within the schema itself still works", () =>
    Effect.gen(function*() {
      const schema = {
        $id: "https://example.com/tree",
        $defs: { node: { type: "object", properties: { children: { type: "array", items: { $ref: "#/$defs/node" } } } } },
        $ref: "#/$defs/node"
      }
      expect(yield* schemaProblem(schema)).toBeUndefined()
      expect(yield* validate("tree:input", schema, { children: [{ children: [] }] })).toBeUndefined()
      expect(yield* validate("tree:input", schema, { children: [{ children: 1 }] })).toMatch(/children/)
    }))

  it.live("two schemas with the same $id compile and validate independently, each by its own rules", () =>
    Effect.gen(function*() {
      const text = { $id: "https://example.com/same", type: "string" }
      const number = { $id: "https://example.com/same", type: "integer" }
      expect(yield* schemaProblem(text)).toBeUndefined()
      expect(yield* schemaProblem(number)).toBeUndefined()
      expect(yield* validate("ten1_tool:input", text, "x")).toBeUndefined()
      expect(yield* validate("ten2_tool:input", number, 5)).toBeUndefined()
      expect(yield* validate("ten1_tool:input", text, 5)).toMatch(/must be string/)
      expect(yield* validate("ten2_tool:input", number, "x")).toMatch(/must be integer/)
    }))

  it.live("the cache stays at its bound, and nothing of an evicted schema is remembered anywhere", () =>
    Effect.gen(function*() {
      const schema = (i: number) => ({ $id: `https://example.com/s${i}`, type: "integer", minimum: i })
      for (let i = 0; i < CACHE_LIMIT + 50; i++) expect(yield* validate(`bound_${i}:input`, schema(i), i)).toBeUndefined()
      expect(yield* cacheSize).toBe(CACHE_LIMIT)
      // The first keys were evicted; compiling them again works (no global registry holds their $id).
      expect(yield* validate("bound_0:input", schema(0), 0)).toBeUndefined()
      expect(yield* validate("bound_1:input", schema(1), 0)).toMatch(/must be >= 1/)
      expect(yield* cacheSize).toBe(CACHE_LIMIT)
      expect(yield* schemaProblem({ $ref: "https://example.com/s2" })).toBeDefined()
    }))

  it.live("patterns RE2 cannot express (backreferences, lookarounds) are refused at registration", () =>
    Effect.gen(function*() {
      for (const pattern of ["(a)\\1", "(?<x>a)\\k<x>", "a(?=b)", "(?<!a)b"]) {
        expect(yield* schemaProblem({ type: "string", pattern })).toMatch(/pattern .* is not supported/)
      }
      expect(yield* schemaProblem({ type: "object", patternProperties: { "^(?!x)": {} } })).toMatch(/pattern .* is not supported/)
      expect(yield* schemaProblem({ type: "string", pattern: "(" })).toMatch(/pattern/)
    }))

  it.live("ordinary patterns and pattern properties keep their meaning", () =>
    Effect.gen(function*() {
      const schema = {
        type: "object",
        properties: { code: { type: "string", pattern: "^[A-Z]{2}-\\d{4}$" }, name: { type: "string", pattern: "^\\p{L}+$" } },
        patternProperties: { "^x-": { type: "integer" } }
      }
      expect(yield* schemaProblem(schema)).toBeUndefined()
      expect(yield* validate("ordinary:input", schema, { code: "AB-1234", name: "Zoë", "x-a": 1 })).toBeUndefined()
      expect(yield* validate("ordinary:input", schema, { code: "ab-1234" })).toMatch(/\/code must match pattern/)
      expect(yield* validate("ordinary:input", schema, { name: "Zoë1" })).toMatch(/\/name must match pattern/)
      expect(yield* validate("ordinary:input", schema, { "x-a": "1" })).toMatch(/must be integer/)
    }))

  // ---- the bound in time ----------------------------------------------------------------------

  it.live("uniqueItems over 20,000 small objects answers within 2 s, and the service ticks meanwhile", () =>
    Effect.gen(function*() {
      const schema = { type: "array", items: { type: "object" }, uniqueItems: true }
      const items = Array.from({ length: 20_000 }, (_, i) => ({ id: i, name: `item ${i}`, tags: ["a", "b"] }))
      items[1] = { tags: ["a", "b"], name: "item 0", id: 0 } // equal to items[0], keys in another order
      const { problem, tick, took } = yield* alongside(validate("unique:output", schema, items))
      expect(took).toBeLessThan(2000)
      expect(tick).toBeLessThan(200)
      expect(problem).toBe("(root) must NOT have duplicate items (items ## 0 and 1 are identical)")
      // Linear, so it answers on its own, well within the deadline; and distinct items pass.
      items[1] = { id: 1, name: "item 1", tags: ["a", "b"] }
      expect(yield* validate("unique:output", schema, items)).toBeUndefined()
      expect(yield* validate("unique:output", schema, [[1, { a: 1, b: 2 }], [1, { b: 2, a: 1 }]])).toMatch(/\/0 must be object/)
      const anyItems = { type: "array", uniqueItems: true }
      expect(yield* validate("unique_any:output", anyItems, [[1, { a: 1, b: 2 }], [1, { b: 2, a: 1 }]])).toMatch(/duplicate/)
      expect(yield* validate("unique_any:output", anyItems, [1, "1", [1], { "1": 1 }, null, false, 0])).toBeUndefined()
    }))

  it.live("while one check runs out its deadline, others are answered by the second worker", () =>
    Effect.gen(function*() {
      const slow = yield* Effect.fork(validate("nested:input", recursive, nested(30)))
      yield* Effect.sleep(50)
      const [problem, ms] = yield* timed(validate("integer:input", { type: "integer" }, "x"))
      expect(problem).toMatch(/must be integer/)
      expect(ms).toBeLessThan(DEADLINE_MS)
      expect(yield* Fiber.join(slow)).toBe("validation took longer than 1000 ms")
    }))

  it("the deadline is CPU: a check the machine starved (the process used less than 1000 ms of CPU) goes on, to at most 3000 ms of wall time", () => {
    expect(overdue(1000, 1000)).toBeUndefined() // burned its second: cut
    expect(overdue(1000, 1400)).toBeUndefined()
    expect(overdue(1000, 250)).toBe(750) // starved: what is left of its CPU
    expect(overdue(2800, 100)).toBe(200) // ... within the wall cap
    expect(overdue(WALL_CAP_MS, 0)).toBeUndefined()
    expect(overdue(1000, 995)).toBe(10) // never a busy loop of timers
  })

  it.live("anyOf whose branches $ref back into the schema answers the timeout (at its CPU deadline, within the wall cap) on input nested 22 deep", () =>
    Effect.gen(function*() {
      const value = nested(22)
      expect(JSON.stringify(value).length).toBeLessThan(100)
      const { problem, tick, took } = yield* alongside(validate("nested:input", recursive, value))
      // it burns CPU: cut at its 1000 ms of CPU (about 1 s on an idle machine), by the wall cap on a busy one
      expect(took).toBeLessThan(WALL_CAP_MS + 1000)
      expect(took).toBeGreaterThanOrEqual(DEADLINE_MS - 1)
      expect(tick).toBeLessThan(200)
      expect(problem).toBe("validation took longer than 1000 ms")
      // The worker was replaced: shallow input still answers, by the schema's own rules.
      expect(yield* validate("nested:input", recursive, nested(3))).toMatch(/must be array/)
      expect(yield* validate("nested:input", recursive, [[], [[]]])).toBeUndefined()
    }))
})
