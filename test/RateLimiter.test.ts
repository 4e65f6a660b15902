import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, TestClock } from "effect"
import type { RateLimiter } from "../src/Kernel/RateLimiter.js"
import * as RateLimiterModule from "../src/Kernel/RateLimiter.js"

const policy = { ratePerSecond: 60, burst: 120 } as const
const emissionInterval = Duration.millis(1000 / 60)

/** Takes `n` times in sequence at the current instant. */
const takeN = (limiter: RateLimiter, n: number) => Effect.forEach(Array.from({ length: n }), () => limiter.take)

const countAllowed = (ds: ReadonlyArray<{ readonly allowed: boolean }>) => ds.filter((d) => d.allowed).length

describe("RateLimiter (GCRA, 60 rps, burst 120)", () => {
  it.effect("allows exactly the burst at one instant, then refuses", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      const ds = yield* takeN(limiter, 120)
      expect(countAllowed(ds)).toBe(120)
      expect(ds[0]).toEqual({ allowed: true, limit: 120, remaining: 119, resetSeconds: 1, retryAfterSeconds: 0 })
      expect(ds[119]).toEqual({ allowed: true, limit: 120, remaining: 0, resetSeconds: 2, retryAfterSeconds: 0 })
      // remaining counts down one by one
      expect(ds.map((d) => d.remaining)).toEqual(Array.from({ length: 120 }, (_, i) => 119 - i))

      const refused = yield* limiter.take
      expect(refused.allowed).toBe(false)
      expect(refused.remaining).toBe(0)
      expect(refused.retryAfterSeconds).toBeGreaterThanOrEqual(1)
      expect(refused).toEqual({ allowed: false, limit: 120, remaining: 0, resetSeconds: 2, retryAfterSeconds: 1 })
    }))

  it.effect("one emission interval after a refusal allows exactly one more (refusals do not advance TAT)", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      yield* takeN(limiter, 120)
      // Many refusals must not push the next allowed instant further out.
      const refused = yield* takeN(limiter, 50)
      expect(countAllowed(refused)).toBe(0)

      // Just short of one interval: still refused.
      yield* TestClock.adjust(Duration.millis(1000 / 60 - 0.01))
      expect((yield* limiter.take).allowed).toBe(false)
      yield* TestClock.adjust(Duration.millis(0.01))

      const one = yield* limiter.take
      expect(one.allowed).toBe(true)
      expect(one.remaining).toBe(0)
      const next = yield* limiter.take
      expect(next.allowed).toBe(false)
      expect(next.retryAfterSeconds).toBe(1)
    }))

  it.effect("refills the full burst (and no more) after 2 idle seconds", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      expect(countAllowed(yield* takeN(limiter, 121))).toBe(120)

      // Half-way: one second refills 60.
      yield* TestClock.adjust("1 second")
      expect(countAllowed(yield* takeN(limiter, 61))).toBe(60)

      // Drained again; two idle seconds give back exactly the burst.
      yield* TestClock.adjust("2 seconds")
      const ds = yield* takeN(limiter, 121)
      expect(countAllowed(ds)).toBe(120)
      expect(ds[120]!.allowed).toBe(false)

      // Idling much longer than the refill time does not bank extra quota.
      yield* TestClock.adjust("1 hour")
      expect(countAllowed(yield* takeN(limiter, 121))).toBe(120)
    }))

  // Each TestClock.adjust yields to the event loop a few times (~3-4 ms real
  // time), so these 600+ step simulations get a generous timeout.
  const simulationTimeout = 30_000

  it.effect("sustains 60 rps for 10 s after the burst is drained: all allowed", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      yield* takeN(limiter, 120)
      // One request per emission interval, 600 in all.
      const steady = yield* Effect.forEach(
        Array.from({ length: 600 }),
        () => Effect.zipRight(TestClock.adjust(emissionInterval), limiter.take)
      )
      expect(countAllowed(steady)).toBe(600)
      // ...and the limiter is saturated: nothing extra at the last instant.
      expect((yield* limiter.take).allowed).toBe(false)
    }), simulationTimeout)

  it.effect("61 rps for 10 s after the burst is drained: only the 600 the rate earns pass", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      yield* takeN(limiter, 120)
      const fast = yield* Effect.forEach(
        Array.from({ length: 610 }),
        () => Effect.zipRight(TestClock.adjust(Duration.millis(1000 / 61)), limiter.take)
      )
      expect(countAllowed(fast)).toBe(600)
      expect(fast.length - countAllowed(fast)).toBe(10)
    }), simulationTimeout)

  it.effect("200 concurrent fibers at one instant: exactly 120 allowed, no quota spent twice", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiterModule.make(policy)
      const ds = yield* Effect.all(
        Array.from({ length: 200 }, () => limiter.take),
        { concurrency: "unbounded" }
      )
      const allowed = ds.filter((d) => d.allowed)
      expect(allowed.length).toBe(120)
      // Each allowed decision saw a distinct state: remaining values are 0..119, each once.
      expect(allowed.map((d) => d.remaining).sort((a, b) => a - b)).toEqual(Array.from({ length: 120 }, (_, i) => i))
      expect(ds.filter((d) => !d.allowed).every((d) => d.remaining === 0 && d.retryAfterSeconds >= 1)).toBe(true)
    }))

  it.effect("rejects invalid policies", () =>
    Effect.gen(function*() {
      for (
        const bad of [
          { ratePerSecond: 0, burst: 120 },
          { ratePerSecond: -1, burst: 120 },
          { ratePerSecond: Number.NaN, burst: 120 },
          { ratePerSecond: 60, burst: 0 },
          { ratePerSecond: 60, burst: 1.5 }
        ]
      ) {
        const exit = yield* Effect.exit(RateLimiterModule.make(bad))
        expect(Exit.isFailure(exit)).toBe(true)
      }
      expect(Exit.isSuccess(yield* Effect.exit(RateLimiterModule.make(policy)))).toBe(true)
    }))

  describe("headers (draft-ietf-httpapi-ratelimit-headers)", () => {
    it("policyHeader: quota = burst, window = seconds to refill from empty", () => {
      expect(RateLimiterModule.policyHeader(policy)).toBe("\"burst\";q=120;w=2")
      expect(RateLimiterModule.policyHeader(RateLimiterModule.defaultCellPolicy)).toBe("\"burst\";q=120;w=2")
      // window rounds up to a whole second, never below 1
      expect(RateLimiterModule.policyHeader({ ratePerSecond: 7, burst: 10 })).toBe("\"burst\";q=10;w=2")
      expect(RateLimiterModule.policyHeader({ ratePerSecond: 1000, burst: 10 })).toBe("\"burst\";q=10;w=1")
    })

    it("stateHeader: remaining and seconds until full", () => {
      expect(
        RateLimiterModule.stateHeader({ allowed: true, limit: 120, remaining: 37, resetSeconds: 1, retryAfterSeconds: 0 })
      ).toBe("\"burst\";r=37;t=1")
    })

    it.effect("stateHeader from live decisions", () =>
      Effect.gen(function*() {
        const limiter = yield* RateLimiterModule.make(policy)
        expect(RateLimiterModule.stateHeader(yield* limiter.take)).toBe("\"burst\";r=119;t=1")
        const ds = yield* takeN(limiter, 82) // 83 spent: 1.38 s to refill
        expect(RateLimiterModule.stateHeader(ds[81]!)).toBe("\"burst\";r=37;t=2")
        yield* takeN(limiter, 37)
        expect(RateLimiterModule.stateHeader(yield* limiter.take)).toBe("\"burst\";r=0;t=2")
      }))
  })
})
