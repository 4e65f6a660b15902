/**
 * The rate limit of `/v1` requests that carry no valid key (D19): per client address, 20/s with a
 * burst of 40 by default. A request with no key, an unknown, revoked or expired one (the public key
 * set included) spends from its address's bucket; an address whose bucket is empty is refused
 * (429) before its key is even looked up, so such requests cannot make the service query Postgres
 * at will. Buckets of addresses idle for a minute are dropped when a new address comes, and at
 * most 100,000 are kept (the least recently used go first).
 */
import { Clock, Effect } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import * as RateLimiter from "../Kernel/RateLimiter.js"

const IDLE_MS = 60_000
const MAX_ADDRESSES = 100_000

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

    return {
      refused,
      spend,
      policyHeader: RateLimiter.policyHeader(policy),
      stateHeader: RateLimiter.stateHeader
    } as const
  })
}) {}
