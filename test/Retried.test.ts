/**
 * `retried` (src/Kernel/Retried.ts) attempts as `Effect.retry` does, on TestClock: the same
 * attempts at the same times, the same outcome; a success costs no schedule.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Fiber, Schedule, TestClock } from "effect"

import { retried } from "../src/Kernel/Retried.js"

/** When each attempt of `retrying(attempt)` ran (ms after the start) and how it ended, for an attempt that fails `failures` times. */
const attempts = (
  retrying: (attempt: Effect.Effect<string, string>) => Effect.Effect<string, string>,
  failures: number,
  error = "busy"
) =>
  Effect.gen(function*() {
    const at: Array<number> = []
    const start = yield* Clock.currentTimeMillis
    const attempt = Effect.flatMap(Clock.currentTimeMillis, (now) => {
      at.push(now - start)
      return at.length <= failures ? Effect.fail(error) : Effect.succeed("done")
    })
    const fiber = yield* Effect.fork(Effect.either(retrying(attempt)))
    yield* TestClock.adjust("1 minute")
    return { at, outcome: yield* Fiber.join(fiber) }
  })

const options = {
  schedule: Schedule.exponential("1 second").pipe(Schedule.intersect(Schedule.recurs(2))),
  while: (e: string) => e === "busy"
}

describe("retried", () => {
  it.effect("attempts as Effect.retry does: when, how often, and with what outcome", () =>
    Effect.gen(function*() {
      for (const [failures, error] of [[0, "busy"], [1, "busy"], [2, "busy"], [5, "busy"], [1, "refused"]] as const) {
        const ours = yield* attempts((a) => retried(a, options), failures, error)
        const theirs = yield* attempts((a) => Effect.retry(a, options), failures, error)
        expect(ours, `${failures} ${error}`).toEqual(theirs)
      }
      // the delays themselves: 1 s, then 2 s, then it gives up
      const { at } = yield* attempts((a) => retried(a, options), 5)
      expect(at).toEqual([0, 1000, 3000])
    }))
})
