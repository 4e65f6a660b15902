/**
 * JSON Schema 2020-12 for tool operations, with ajv: a registered schema must itself be valid
 * (checked against the 2020-12 meta-schema and compiled in strict mode, so unknown keywords and
 * typos are refused at registration), and every invocation body and every result is validated
 * against the registered schemas. Compiled validators are cached by the schema's text.
 */
import type { ErrorObject, ValidateFunction } from "ajv"
import * as Ajv2020Module from "ajv/dist/2020.js"

// ajv is CommonJS: under ESM its class is the module's `default`.
const Ajv2020 = Ajv2020Module.default as unknown as typeof Ajv2020Module.Ajv2020

const ajv = new Ajv2020({ strict: true, allErrors: false, validateFormats: false })

const cache = new Map<string, ValidateFunction>()
const MAX_CACHE = 1000

/** Why a registered schema is not acceptable, or undefined when it is. */
export const schemaProblem = (schema: unknown): string | undefined => {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) return "must be a JSON Schema object"
  if (!ajv.validateSchema(schema as object)) return describe(ajv.errors)
  try {
    compile(schema as object)
    return undefined
  } catch (e) {
    return e instanceof Error ? e.message : String(e)
  }
}

const compile = (schema: object): ValidateFunction => {
  const key = JSON.stringify(schema)
  const cached = cache.get(key)
  if (cached !== undefined) return cached
  const compiled = ajv.compile(schema)
  if (cache.size >= MAX_CACHE) cache.delete(cache.keys().next().value!)
  cache.set(key, compiled)
  return compiled
}

/** Validates `value` against a registered schema: undefined when valid, else the first problem. */
export const validate = (schema: object, value: unknown): string | undefined => {
  const check = compile(schema)
  return check(value) ? undefined : describe(check.errors)
}

const describe = (errors: ReadonlyArray<ErrorObject> | null | undefined): string => {
  const first = errors?.[0]
  if (!first) return "is invalid"
  const where = first.instancePath === "" ? "(root)" : first.instancePath
  return `${where} ${first.message ?? "is invalid"}`
}
