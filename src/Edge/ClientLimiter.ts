/**
 * The rate limit of `/v1` requests that carry no valid key (D19): per client address, 20/s with a
 * burst of 40 by default. A request with no key, an unknown, revoked or expired one (the public key
 * set included) spends from its address's bucket; an address whose bucket is empty is refused
 * (429) before its key is even looked up, so such requests cannot make the service query Postgres
 * at will. Buckets of addresses idle for a minute are dropped when a new address comes, and at
 * most 100,000 are kept (the least recently used go first).
 *
 * A client sharing its address with a noisy one (a NAT, a proxy) keeps working: a credential that
 * authenticated in the last five minutes (remembered by its SHA-256, at most 10,000) is looked up
 * even when its address's bucket is empty. A credential refused (revoked, expired, its environment
 * deleted) is forgotten at once (D20: it counts as no key), so once its address's bucket is empty
 * it is refused 429 before any lookup.
 *
 * The operator plane spends from the same buckets (D20): a request to `/operator/v1` or
 * `GET /metrics` whose operator token is wrong or missing spends one, and an address whose bucket
 * is empty is refused 429 before the token is compared, unless its token authenticated lately.
 */
import { Clock, Effect } from "effect"
import { createHash } from "node:crypto"

import { AppConfig } from "../Config/AppConfig.js"
import * as RateLimiter from "../Kernel/RateLimiter.js"

const IDLE_MS = 60_000
const MAX_ADDRESSES = 100_000
const VOUCHED_MS = 5 * 60_000
const MAX_VOUCHED = 10_000

const digest = (credential: string) => createHash("sha256").update(credential).digest("base64url")

export class ClientLimiter extends Effect.Service<ClientLimiter>()("ClientLimiter", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const policy = config.edge.clientRateLimit
    const buckets = new Map<string, { readonly limiter: RateLimiter.RateLimiter; lastUsed: number }>()

    const bucketOf = (address: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        let bucket = buckets.get(address)
        if (bucket === undefined) {
          // The map is in least-recently-used order: drop idle buckets from its front (no timer).
          for (const [idle, b] of buckets) {
            if (now - b.lastUsed <= IDLE_MS && buckets.size < MAX_ADDRESSES) break
            buckets.delete(idle)
          }
          bucket = { limiter: yield* RateLimiter.make(policy), lastUsed: now }
        } else {
          buckets.delete(address) // keep the map in least-recently-used order
        }
        bucket.lastUsed = now
        buckets.set(address, bucket)
        return bucket.limiter
      })

    /** The address's state when it may not try another request without a valid key (nothing spent). */
    const refused = (address: string) =>
      Effect.suspend(() => {
        const bucket = buckets.get(address)
        return bucket === undefined
          ? Effect.succeed(undefined)
          : Effect.map(bucket.limiter.peek, (d) => (d.allowed ? undefined : d))
      })

    /** A request of the address carried no valid key: it spends one; the decision. */
    const spend = (address: string) => Effect.flatMap(bucketOf(address), (limiter) => limiter.take)

    // Credentials that authenticated lately (digest -> when), in least-recently-vouched order.
    const vouched = new Map<string, number>()

    /** The credential authenticated: remember it for five minutes. */
    const vouch = (credential: string) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const d = digest(credential)
        vouched.delete(d)
        vouched.set(d, now)
        for (const [old, at] of vouched) {
          if (vouched.size <= MAX_VOUCHED && now - at <= VOUCHED_MS) break
          vouched.delete(old)
        }
      })

    /** The credential was refused: it is no longer vouched for (D20: a revoked or expired key counts as no key). */
    const forget = (credential: string | undefined) =>
      Effect.sync(() => {
        if (credential !== undefined && vouched.size > 0) vouched.delete(digest(credential))
      })

    /** Whether the credential authenticated in the last five minutes. */
    const known = (credential: string | undefined) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (credential === undefined) return false
        const at = vouched.get(digest(credential))
        return at !== undefined && now - at <= VOUCHED_MS
      })

    return {
      refused,
      spend,
      vouch,
      forget,
      known,
      policyHeader: RateLimiter.policyHeader(policy),
      stateHeader: RateLimiter.stateHeader
    } as const
  })
}) {}
