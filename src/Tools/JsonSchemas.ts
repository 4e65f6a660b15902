/**
 * Customer JSON Schemas (tool `input_schema` / `output_schema`, JSON Schema 2020-12), isolated per
 * schema (D19). A registered schema must itself be valid: checked against the 2020-12 meta-schema
 * and compiled in strict mode, so unknown keywords and typos are refused at registration; every
 * invocation body and every result is validated against the registered schemas.
 *
 * Isolation: every schema is compiled in its own, fresh ajv instance that knows no other schema
 * (not even the meta-schemas), so `$ref` reaches only inside the schema itself (`#...` pointers,
 * `$defs`, its own `$id`/`$anchor`s) and anything else fails to compile; a `$id` means nothing
 * outside its schema, so two tenants' equal `$id`s neither collide nor see each other. The one
 * shared instance (`meta`) only checks schemas against the 2020-12 meta-schema; it never adds or
 * compiles a customer schema, and `$schema` may name only that meta-schema.
 *
 * Memory: compiled validators are kept in a bounded LRU (`CACHE_LIMIT`) under a key the caller
 * gives, the tool id and which schema (`tool_...:input`); tools are immutable, so a key never
 * changes meaning. An evicted validator takes its ajv instance with it. Registration checks
 * (`schemaProblem`) compile in a throwaway instance and cache nothing.
 *
 * Time: `pattern` and `patternProperties` run on RE2 (re2js, linear in the input) through ajv's
 * `code.regExp`, never on V8's backtracking RegExp. A pattern must be valid ECMA-262 (`u` flag),
 * as JSON Schema says, and expressible in RE2: backreferences and lookarounds are refused at
 * registration. RE2 semantics differ from ECMA-262 in corners: `\s` is ASCII whitespace only and
 * `.` excludes only `\n`. ajv's strict check that a property is also matched by a pattern
 * property ran the pattern on V8, so it is off (`allowMatchingProperties`; JSON Schema allows the
 * overlap). Formats are not validated (`validateFormats: false`), and inputs are size-limited
 * before they get here (request bodies 1 MiB, tool answers 1 MiB). What is NOT linear, honestly:
 * - `uniqueItems` over object or array items compares every pair (quadratic: 20,000 distinct
 *   small objects, 230 KB, take about 12 s on one core);
 * - applicators over a recursive `$ref` (e.g. `items: { anyOf: [{ $ref: "#" }, { $ref: "#" }] }`)
 *   retry each branch at each level: exponential in the nesting depth of the input (22 levels,
 *   under 100 bytes, about 30 s).
 * So a validation is bounded by the input size, but not tightly: bounding it in time needs a
 * deadline (a worker) or refusing those shapes at registration; neither is done here.
 */
import type { CodeOptions, ErrorObject, Options } from "ajv"
import * as Ajv2020Module from "ajv/dist/2020.js"
import { RE2JS } from "re2js"

// ajv is CommonJS: under ESM its class is the module's `default`.
const Ajv2020 = Ajv2020Module.default as unknown as typeof Ajv2020Module.Ajv2020

/** The only meta-schema a customer schema may name in `$schema`. */
const META_SCHEMA = "https://json-schema.org/draft/2020-12/schema"

/** How many compiled validators are kept; the least recently used is evicted beyond it. */
export const CACHE_LIMIT = 1000

const message = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** A backreference (`\1`..`\9`, `\k<name>`) in a pattern that is valid ECMA-262 with the `u` flag. */
const hasBackreference = (pattern: string) => {
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] !== "\\") continue
    i++
    if (/[1-9k]/.test(pattern[i] ?? "")) return true
  }
  return false
}

/** Compiles an ECMA-262 pattern to RE2, or throws saying why it cannot run in linear time. */
const linearPattern = (pattern: string, flags: string): RE2JS => {
  const quoted = JSON.stringify(pattern)
  try {
    RegExp(pattern, flags) // only parsed, never run: the pattern must be what JSON Schema allows
  } catch (e) {
    throw new Error(`pattern ${quoted} is not a valid ECMA-262 regular expression: ${message(e)}`)
  }
  if (hasBackreference(pattern)) {
    throw new Error(`pattern ${quoted} is not supported: backreferences cannot be matched in linear time`)
  }
  try {
    return RE2JS.compile(RE2JS.translateRegExp(pattern))
  } catch (e) {
    throw new Error(`pattern ${quoted} is not supported by the linear-time engine (RE2: no lookarounds): ${message(e)}`)
  }
}

/** ajv's `code.regExp`, called as `(pattern, "u")`; `toString` keys ajv's per-instance pattern table. */
const regExp: NonNullable<CodeOptions["regExp"]> = Object.assign(
  (pattern: string, flags: string) => {
    const re2 = linearPattern(pattern, flags)
    return { test: (s: string) => re2.test(s), toString: () => `/${pattern}/${flags}` }
  },
  { code: "re2js" }
)

const options: Options = { strict: true, allErrors: false, validateFormats: false, allowMatchingProperties: true, code: { regExp } }

/** Checks schemas against the 2020-12 meta-schema; holds no customer schema. */
const meta = new Ajv2020(options)

/** Compiles one schema in a fresh instance that knows nothing else (so `$ref` stays inside it). */
const compile = (schema: object) => new Ajv2020({ ...options, meta: false, validateSchema: false }).compile(schema)

const describe = (errors: ReadonlyArray<ErrorObject> | null | undefined): string => {
  const first = errors?.[0]
  if (!first) return "is invalid"
  const where = first.instancePath === "" ? "(root)" : first.instancePath
  return `${where} ${first.message ?? "is invalid"}`
}

/** Why a registered schema is not acceptable, or undefined when it is. Caches nothing. */
export const schemaProblem = (schema: unknown): string | undefined => {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) return "must be a JSON Schema object"
  const named = (schema as { $schema?: unknown }).$schema
  if (named !== undefined && named !== META_SCHEMA && named !== `${META_SCHEMA}#`) return `$schema must be ${META_SCHEMA}`
  if (!meta.validateSchema(schema)) return describe(meta.errors)
  try {
    compile(schema)
    return undefined
  } catch (e) {
    return message(e)
  }
}

type Validator = (value: unknown) => string | undefined

/** Least recently used first: a hit moves its key to the end. */
const cache = new Map<string, Validator>()

const validator = (schema: object): Validator => {
  try {
    const check = compile(schema)
    return (value) => (check(value) ? undefined : describe(check.errors))
  } catch (e) {
    // Registration refuses such a schema; one stored under older rules validates nothing.
    const problem = `the schema cannot be compiled: ${message(e)}`
    return () => problem
  }
}

/**
 * Validates `value` against a registered schema: undefined when valid, else the first problem.
 * `key` names the schema for good (e.g. `${tool.id}:input`): the validator compiled for it is reused.
 */
export const validate = (key: string, schema: object, value: unknown): string | undefined => {
  let check = cache.get(key)
  if (check === undefined) {
    check = validator(schema)
    if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value!)
  } else {
    cache.delete(key)
  }
  cache.set(key, check)
  return check(value)
}

/** How many compiled validators are cached (at most `CACHE_LIMIT`). */
export const cacheSize = (): number => cache.size
