/**
 * The console's secrets, made and checked (issue 38): passwords as scrypt hashes, random tokens
 * (sessions, links, recovery codes) stored as SHA-256 digests, HMAC signatures (links, CSRF).
 *
 * scrypt (Node's own, RFC 7914) with N = 2^15, r = 8, p = 1: 128 * N * r = 32 MiB of memory and
 * ~0.1 s of one core per hash, the parameters OWASP's password storage cheat sheet lists for
 * scrypt (N=2^17 r=8 p=1 is its first line; 2^15 keeps a sign-in within this 2-core service's
 * budget while a guess still costs 32 MiB). The parameters are stored with each hash, so raising
 * them later leaves old hashes checkable.
 */
import { Effect } from "effect"
import { createHash, createHmac, randomBytes, scrypt, timingSafeEqual } from "node:crypto"

const N = 2 ** 15
const R = 8
const P = 1
const KEY_LENGTH = 32

const derive = (password: string, salt: Buffer, n: number, r: number, p: number) =>
  Effect.async<Buffer>((resume) => {
    scrypt(password.normalize("NFKC"), salt, KEY_LENGTH, { N: n, r, p, maxmem: 256 * n * r }, (error, key) =>
      resume(error ? Effect.die(error) : Effect.succeed(key)))
  })

/** `scrypt$N$r$p$salt$hash` (base64url). */
export const hashPassword = (password: string): Effect.Effect<string> => {
  const salt = randomBytes(16)
  return Effect.map(
    derive(password, salt, N, R, P),
    (key) => `scrypt$${N}$${R}$${P}$${salt.toString("base64url")}$${key.toString("base64url")}`
  )
}

/** Whether `password` is the one `stored` was made of (false for a malformed hash). */
export const checkPassword = (password: string, stored: string): Effect.Effect<boolean> => {
  const [kind, n, r, p, salt, key] = stored.split("$")
  if (kind !== "scrypt" || key === undefined) return Effect.succeed(false)
  const expected = Buffer.from(key, "base64url")
  return Effect.map(
    derive(password, Buffer.from(salt!, "base64url"), Number(n), Number(r), Number(p)),
    (got) => got.length === expected.length && timingSafeEqual(got, expected)
  )
}

/** A hash that is no password's: checked when the address is unknown, so both take as long. */
export const NO_PASSWORD = `scrypt$${N}$${R}$${P}$${randomBytes(16).toString("base64url")}$${randomBytes(KEY_LENGTH).toString("base64url")}`

/** 256 random bits, base64url. */
export const token = (): string => randomBytes(32).toString("base64url")

export const digest = (value: string): Buffer => createHash("sha256").update(value, "utf8").digest()

export const sign = (key: Buffer, value: string): string => createHmac("sha256", key).update(value, "utf8").digest("base64url")

export const sameText = (a: string, b: string): boolean => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

/** Ten recovery codes, `xxxxx-xxxxx` of a lowercase alphabet without look-alikes (50 bits each). */
export const recoveryCodes = (): ReadonlyArray<string> => {
  const alphabet = "abcdefghjkmnpqrstuvwxyz23456789"
  return Array.from({ length: 10 }, () => {
    const bytes = randomBytes(10)
    const chars = [...bytes].map((b) => alphabet[b % alphabet.length]!)
    return `${chars.slice(0, 5).join("")}-${chars.slice(5).join("")}`
  })
}
