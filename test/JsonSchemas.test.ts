/**
 * Customer JSON Schemas are isolated per tool schema (D19): each compiles in its own ajv instance,
 * so `$ref` reaches only inside the schema and `$id` means nothing outside it; `pattern` runs on
 * RE2 (linear time), and a pattern RE2 cannot express is refused at registration; compiled
 * validators live in a bounded LRU. Pure unit tests of `src/Tools/JsonSchemas.ts`, no server.
 */
import { describe, expect, it } from "@effect/vitest"
import { CACHE_LIMIT, cacheSize, schemaProblem, validate } from "../src/Tools/JsonSchemas.js"

const timed = <A>(f: () => A): [A, number] => {
  const start = performance.now()
  const result = f()
  return [result, performance.now() - start]
}

describe("customer JSON Schemas (D19)", () => {
  it("pattern runs in linear time: ^(a|aa)+$ against 40 a's and a b is refused within milliseconds", () => {
    const schema = { type: "string", pattern: "^(a|aa)+$" }
    expect(schemaProblem(schema)).toBeUndefined()
    const [problem, ms] = timed(() => validate("redos:input", schema, "a".repeat(40) + "b"))
    expect(problem).toMatch(/must match pattern/)
    expect(ms).toBeLessThan(50)
    expect(validate("redos:input", schema, "a".repeat(41))).toBeUndefined()
  })

  it("a pattern property overlapping a named property costs no backtracking at registration", () => {
    const schema = { type: "object", properties: { ["a".repeat(40) + "b"]: {} }, patternProperties: { "^(a|aa)+$": {} } }
    const [problem, ms] = timed(() => schemaProblem(schema))
    expect(problem).toBeUndefined()
    expect(ms).toBeLessThan(50)
  })

  it("a schema cannot $ref another tool's schema by its $id", () => {
    const a = { $id: "https://example.com/a", type: "string", minLength: 3 }
    expect(schemaProblem(a)).toBeUndefined()
    expect(validate("conn1:input", a, "abc")).toBeUndefined()
    const b = { $ref: "https://example.com/a" }
    expect(schemaProblem(b)).toMatch(/https:\/\/example\.com\/a/)
    // A tool stored before this rule: its schema no longer compiles, so nothing validates against it.
    expect(validate("conn2:input", b, "abc")).toMatch(/cannot be compiled/)
  })

  it("$ref within the schema itself still works", () => {
    const schema = {
      $id: "https://example.com/tree",
      $defs: { node: { type: "object", properties: { children: { type: "array", items: { $ref: "#/$defs/node" } } } } },
      $ref: "#/$defs/node"
    }
    expect(schemaProblem(schema)).toBeUndefined()
    expect(validate("tree:input", schema, { children: [{ children: [] }] })).toBeUndefined()
    expect(validate("tree:input", schema, { children: [{ children: 1 }] })).toMatch(/children/)
  })

  it("two schemas with the same $id compile and validate independently, each by its own rules", () => {
    const text = { $id: "https://example.com/same", type: "string" }
    const number = { $id: "https://example.com/same", type: "integer" }
    expect(schemaProblem(text)).toBeUndefined()
    expect(schemaProblem(number)).toBeUndefined()
    expect(validate("ten1_tool:input", text, "x")).toBeUndefined()
    expect(validate("ten2_tool:input", number, 5)).toBeUndefined()
    expect(validate("ten1_tool:input", text, 5)).toMatch(/must be string/)
    expect(validate("ten2_tool:input", number, "x")).toMatch(/must be integer/)
  })

  it("the cache stays at its bound, and nothing of an evicted schema is remembered anywhere", () => {
    const schema = (i: number) => ({ $id: `https://example.com/s${i}`, type: "integer", minimum: i })
    for (let i = 0; i < CACHE_LIMIT + 50; i++) expect(validate(`bound_${i}:input`, schema(i), i)).toBeUndefined()
    expect(cacheSize()).toBe(CACHE_LIMIT)
    // The first keys were evicted; compiling them again works (no global registry holds their $id).
    expect(validate("bound_0:input", schema(0), 0)).toBeUndefined()
    expect(validate("bound_1:input", schema(1), 0)).toMatch(/must be >= 1/)
    expect(cacheSize()).toBe(CACHE_LIMIT)
    expect(schemaProblem({ $ref: "https://example.com/s2" })).toBeDefined()
  })

  it("patterns RE2 cannot express (backreferences, lookarounds) are refused at registration", () => {
    for (const pattern of ["(a)\\1", "(?<x>a)\\k<x>", "a(?=b)", "(?<!a)b"]) {
      expect(schemaProblem({ type: "string", pattern })).toMatch(/pattern .* is not supported/)
    }
    expect(schemaProblem({ type: "object", patternProperties: { "^(?!x)": {} } })).toMatch(/pattern .* is not supported/)
    expect(schemaProblem({ type: "string", pattern: "(" })).toMatch(/pattern/)
  })

  it("ordinary patterns and pattern properties keep their meaning", () => {
    const schema = {
      type: "object",
      properties: { code: { type: "string", pattern: "^[A-Z]{2}-\\d{4}$" }, name: { type: "string", pattern: "^\\p{L}+$" } },
      patternProperties: { "^x-": { type: "integer" } }
    }
    expect(schemaProblem(schema)).toBeUndefined()
    expect(validate("ordinary:input", schema, { code: "AB-1234", name: "Zoë", "x-a": 1 })).toBeUndefined()
    expect(validate("ordinary:input", schema, { code: "ab-1234" })).toMatch(/\/code must match pattern/)
    expect(validate("ordinary:input", schema, { name: "Zoë1" })).toMatch(/\/name must match pattern/)
    expect(validate("ordinary:input", schema, { "x-a": "1" })).toMatch(/must be integer/)
  })
})
