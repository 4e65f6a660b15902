import { randomBytes } from "node:crypto"
import { Clock, Effect, Schema } from "effect"

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

const encodeRandom = (bytes: number): string => {
  const buf = randomBytes(bytes)
  let out = ""
  for (const b of buf) out += CROCKFORD[b % 32]
  return out
}

/** `prefix_` + 10 chars of time (ms, sortable) + 16 random chars: opaque, time-ordered (D2). */
export const makeId = (prefix: string): Effect.Effect<string> =>
  Effect.map(Clock.currentTimeMillis, (ms) => `${prefix}_${encodeTime(ms)}${encodeRandom(16)}`)

/** Path identifiers: 1..128 characters (contract 2.2, D2). */
export const PathId = Schema.String.pipe(
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
