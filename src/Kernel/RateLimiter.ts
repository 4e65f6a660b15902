/**
 * Per-cell rate limiter (one per tenant/environment pair).
 *
 * Algorithm: GCRA, the generic cell rate algorithm, which behaves like a token
 * bucket but keeps a single number of state, the theoretical arrival time
 * (TAT): the instant at which the bucket would be full again if no further
 * request arrived.
 *
 *   T   (emission interval) = 1000 / ratePerSecond ms
 *   tau (tolerance)         = T * burst
 *
 * A request arriving at `now` is allowed iff `max(TAT, now) + T - now <= tau`;
 * if it is, TAT becomes `max(TAT, now) + T`. A refused request leaves TAT
 * untouched, so hammering a limiter while refused costs nothing. From an idle
 * limiter exactly `burst` requests are allowed at a single instant.
 *
 * Time comes from Effect's `Clock` (so tests drive it with `TestClock`).
 * `Clock.currentTimeMillis` is used rather than `currentTimeNanos` because
 * `TestClock.currentTimeNanos` throws when the test clock has been moved by a
 * fractional number of milliseconds (e.g. one emission interval of 1000/60 ms).
 *
 * Arithmetic is exact: times are kept as bigint "units", with one emission
 * interval being exactly `UNITS_PER_EMISSION` units (16.7 ns at 60 rps).
 * Floating milliseconds would accumulate rounding error and, at the boundary,
 * allow `burst - 1` or `burst + 1` requests. Clock readings are taken relative
 * to the limiter's creation, so they stay small and precise before rounding.
 */
import { Cause, Clock, Effect, Ref } from "effect"

export interface RateLimitPolicy {
  readonly ratePerSecond: number
  readonly burst: number
}

export interface RateLimitDecision {
  readonly allowed: boolean
  /** The burst (quota). */
  readonly limit: number
  /** Whole requests still available right now, after this decision (>= 0). */
  readonly remaining: number
  /** Whole seconds (rounded up) until the bucket is full again. */
  readonly resetSeconds: number
  /** 0 when allowed; otherwise whole seconds (rounded up, >= 1) until one request is allowed. */
  readonly retryAfterSeconds: number
}

export interface RateLimiter {
  /** Asks for one request's worth of quota; spends it only when allowed. */
  readonly take: Effect.Effect<RateLimitDecision>
  /** Whether a request would be allowed now, spending nothing. */
  readonly peek: Effect.Effect<RateLimitDecision>
  readonly policy: RateLimitPolicy
}

/** The policy every cell gets: 60 requests/second, burst 120. */
export const defaultCellPolicy: RateLimitPolicy = { ratePerSecond: 60, burst: 120 }

/** One emission interval T, in internal time units. */
const UNITS_PER_EMISSION = 1_000_000n

/**
 * Builds a limiter that starts full. Dies (a programming error, not a typed
 * failure) unless `ratePerSecond` is a finite number > 0 and `burst` an
 * integer >= 1.
 */
export const make = (policy: RateLimitPolicy): Effect.Effect<RateLimiter> =>
  Effect.gen(function*() {
    const { burst, ratePerSecond } = policy
    if (!(Number.isFinite(ratePerSecond) && ratePerSecond > 0) || !(Number.isSafeInteger(burst) && burst >= 1)) {
      return yield* Effect.die(
        new Cause.IllegalArgumentException(
          `RateLimiter: invalid policy ratePerSecond=${ratePerSecond} burst=${burst}`
        )
      )
    }
    const T = UNITS_PER_EMISSION
    const tau = T * BigInt(burst)
    // Units per millisecond / per second (T units = 1000 / ratePerSecond ms).
    const unitsPerMilli = ratePerSecond * Number(T) / 1000
    const unitsPerSecond = ratePerSecond * Number(T)
    const origin = yield* Clock.currentTimeMillis
    const toUnits = (millis: number): bigint => BigInt(Math.round((millis - origin) * unitsPerMilli))
    // Differences handed to this are at most tau + T, so Number() is exact.
    const ceilSeconds = (units: bigint): number => units <= 0n ? 0 : Math.ceil(Number(units) / unitsPerSecond)

    // TAT at the origin: the bucket starts full.
    const tatRef = yield* Ref.make(0n)

    const decide = (allowed: boolean, tat: bigint, now: bigint): RateLimitDecision => {
      const free = now + tau - tat // quota not yet claimed, in units
      return {
        allowed,
        limit: burst,
        remaining: free <= 0n ? 0 : Math.min(burst, Number(free / T)),
        resetSeconds: ceilSeconds(tat - now),
        // Earliest instant a request passes: when TAT + T - now == tau.
        retryAfterSeconds: allowed ? 0 : Math.max(1, ceilSeconds(tat + T - tau - now))
      }
    }

    const take = Effect.flatMap(Clock.currentTimeMillis, (millis) => {
      const now = toUnits(millis)
      // Ref.modify is one atomic read-modify-write: concurrent fibers never
      // see the same TAT, so the quota cannot be spent twice.
      return Ref.modify(tatRef, (tat): readonly [RateLimitDecision, bigint] => {
        const next = (tat > now ? tat : now) + T
        return next - now <= tau
          ? [decide(true, next, now), next]
          : [decide(false, tat, now), tat] // refused: TAT does not move
      })
    })

    /** What `take` would answer now, spending nothing. */
    const peek = Effect.flatMap(Clock.currentTimeMillis, (millis) => {
      const now = toUnits(millis)
      return Effect.map(Ref.get(tatRef), (tat) => {
        const next = (tat > now ? tat : now) + T
        return next - now <= tau ? decide(true, tat, now) : decide(false, tat, now)
      })
    })

    return { take, peek, policy }
  })

/*
 * Header helpers for draft-ietf-httpapi-ratelimit-headers (draft-08 onward,
 * RFC 9651 structured fields), e.g.
 *
 *   RateLimit-Policy: "burst";q=120;w=2
 *   RateLimit: "burst";r=37;t=1
 *
 * The policy is named "burst" in both fields. The GCRA bucket is described as
 * its quota `q` = burst over a window `w` = the seconds it takes to refill
 * from empty, burst / ratePerSecond, rounded up to a whole second (>= 1)
 * because the draft requires an integer.
 */
const POLICY_NAME = "\"burst\""

/** `RateLimit-Policy` field value, e.g. `"burst";q=120;w=2`. */
export const policyHeader = (policy: RateLimitPolicy): string =>
  `${POLICY_NAME};q=${policy.burst};w=${Math.max(1, Math.ceil(policy.burst / policy.ratePerSecond))}`

/** `RateLimit` field value, e.g. `"burst";r=37;t=1`: remaining and seconds until full. */
export const stateHeader = (d: RateLimitDecision): string => `${POLICY_NAME};r=${d.remaining};t=${d.resetSeconds}`
