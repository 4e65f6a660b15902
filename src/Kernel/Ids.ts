import { Clock, Effect, Schema } from "effect"

import { randomView } from "./Random.js"
import { SingleLine } from "./Strings.js"

const CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"

const encodeTime = (ms: number): string => {
  let out = ""
  let t = ms
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[t % 32] + out
    t = Math.floor(t / 32)
  }
  return out
}

// Monotonic within the process (as ULID's monotonic mode): an id made in the same millisecond as
// the previous one increments its random part, so ids sort in creation order.
let lastMs = -1
let lastRandom = 0n
const RANDOM_BITS = 80n // 16 base32 characters

const nextRandom = (ms: number): bigint => {
  if (ms <= lastMs) {
    lastRandom = (lastRandom + 1n) & ((1n << RANDOM_BITS) - 1n)
    return lastRandom
  }
  lastMs = ms
  // Leave headroom so increments within one millisecond never wrap.
  lastRandom = BigInt("0x" + randomView(10).toString("hex")) >> 1n
  return lastRandom
}

const encodeRandom = (value: bigint): string => {
  let out = ""
  let v = value
  for (let i = 0; i < 16; i++) {
    out = CROCKFORD[Number(v & 31n)] + out
    v >>= 5n
  }
  return out
}

/** `prefix_` + 10 chars of time (ms) + 16 chars of randomness: opaque, time-ordered (D2). */
export const makeId = (prefix: string): Effect.Effect<string> =>
  Effect.map(Clock.currentTimeMillis, (ms) => {
    const at = Math.max(ms, lastMs)
    return `${prefix}_${encodeTime(at)}${encodeRandom(nextRandom(at))}`
  })

/** Path identifiers: 1..128 characters (contract 2.2, D2). */
export const PathId = SingleLine.pipe(
  Schema.minLength(1, { message: () => "must be 1 to 128 characters" }),
  Schema.maxLength(128, { message: () => "must be 1 to 128 characters" })
)

/** EnvironmentName (D2). */
export const EnvironmentName = Schema.Literal("sandbox", "production").annotations({
  identifier: "EnvironmentName",
  message: () => "must be one of: sandbox, production"
})
export type EnvironmentName = typeof EnvironmentName.Type

/** RFC 3339 UTC timestamp strings from epoch milliseconds. */
export const toIso = (ms: number | Date): string => new Date(ms).toISOString()
export const Timestamp = Schema.String.annotations({ format: "date-time", description: "RFC 3339 UTC" })

/**
 * An RFC 3339 date-time as a request gives one: upper-case `T`, seconds (not a leap second), and
 * `Z` or an offset. The document states it as `format: date-time` with this pattern.
 */
const RFC3339 = /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/
export const DateTimeParam = Schema.String.pipe(
  Schema.pattern(RFC3339, {
    message: () => "must be an RFC 3339 time, e.g. 2025-01-31T09:00:00Z",
    jsonSchema: { format: "date-time", pattern: RFC3339.source }
  })
)
