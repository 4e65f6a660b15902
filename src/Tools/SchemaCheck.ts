/**
 * The synchronous JSON Schema checks behind `JsonSchemas.ts` (D19), run only inside the schema
 * worker (`SchemaWorker.ts`), never on the service's main thread: whatever they cost, the main
 * thread only waits for a message, and the worker is terminated at the deadline.
 *
 * Isolation: every schema is compiled in its own, fresh ajv instance that knows no other schema
 * (not even the meta-schemas), so `$ref` reaches only inside the schema itself and `$id` means
 * nothing outside it. The one shared instance (`meta`) only checks schemas against the 2020-12
 * meta-schema; it never adds or compiles a customer schema.
 *
 * Linear keywords: `pattern`/`patternProperties` run on RE2 (re2js) through ajv's `code.regExp`;
 * `uniqueItems` is replaced by a linear check (a Map keyed by each item's canonical JSON) instead
 * of ajv's comparison of every pair of object or array items. Compiled validators are kept in a
 * bounded LRU under the caller's key.
 */
import type { CodeOptions, ErrorObject, FuncKeywordDefinition, Options } from "ajv"
import * as Ajv2020Module from "ajv/dist/2020.js"
import { RE2JS } from "re2js"

import { canonicalJson } from "../Kernel/Json.js"

// ajv is CommonJS: under ESM its class is the module's `default`.
const Ajv2020 = Ajv2020Module.default as unknown as typeof Ajv2020Module.Ajv2020

/** The only meta-schema a customer schema may name in `$schema`. */
const META_SCHEMA = "https://json-schema.org/draft/2020-12/schema"

export const message = (e: unknown) => (e instanceof Error ? e.message : String(e))

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

type DataCheck = ReturnType<NonNullable<FuncKeywordDefinition["compile"]>>

/**
 * `uniqueItems` in one pass: JSON values are equal exactly when their canonical JSON (keys
 * sorted) is, so a Map of those strings replaces ajv's comparison of every pair of object items.
 * ajv clears `errors` before each call; the keyword's `type` makes `data` an array.
 */
const allDistinct: DataCheck = (data: ReadonlyArray<unknown>) => {
  const seen = new Map<string, number>()
  for (const [i, item] of data.entries()) {
    const text = canonicalJson(item)
    const j = seen.get(text)
    if (j !== undefined) {
      const message = `must NOT have duplicate items (items ## ${j} and ${i} are identical)`
      allDistinct.errors = [{ keyword: "uniqueItems", params: { i, j }, message }]
      return false
    }
    seen.set(text, i)
  }
  return true
}

const uniqueItems: FuncKeywordDefinition = {
  keyword: "uniqueItems",
  type: "array",
  schemaType: "boolean",
  errors: true,
  compile: (unique: boolean): DataCheck => (unique ? allDistinct : () => true)
}

const options: Options = { strict: true, allErrors: false, validateFormats: false, allowMatchingProperties: true, code: { regExp } }

/** Checks schemas against the 2020-12 meta-schema; holds no customer schema. */
const meta = new Ajv2020(options)

/** Compiles one schema in a fresh instance that knows nothing else (so `$ref` stays inside it). */
const compile = (schema: object) =>
  new Ajv2020({ ...options, meta: false, validateSchema: false }).removeKeyword("uniqueItems").addKeyword(uniqueItems).compile(schema)

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

/** Answered when the schema was not sent and its validator is not (or no longer) cached. */
export const MISSING = Symbol("missing")

/**
 * Compiled validators in a bounded LRU (least recently used first: a hit moves its key to the
 * end) of at most `limit`. `key` names a schema for good (e.g. `${tool.id}:input`), so `schema`
 * may be left out when its validator is cached; otherwise the answer is `MISSING`.
 */
export const validatorCache = (limit: number) => {
  const cache = new Map<string, Validator>()
  /** Validates `value`: undefined when valid, else the first problem. */
  const validate = (key: string, schema: object | undefined, value: unknown): string | undefined | typeof MISSING => {
    let check = cache.get(key)
    if (check === undefined) {
      if (schema === undefined) return MISSING
      check = validator(schema)
      if (cache.size >= limit) cache.delete(cache.keys().next().value!)
    } else {
      cache.delete(key)
    }
    cache.set(key, check)
    return check(value)
  }
  return { validate, size: () => cache.size }
}
