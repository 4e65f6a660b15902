/**
 * A deadline kept by a timer of its own (issue 41): the caller is answered at the deadline even
 * when the timed-out call cannot be interrupted (a call to a hung node), and the call is interrupted
 * in the background. Real time on purpose (the helper is about real timers): a few tens of ms.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber } from "effect"
import { withRealDeadline } from "../src/Kernel/RealTime.js"

describe("withRealDeadline", () => {
  it.live("answers at the deadline although the call holds its interruption, and interrupts it after", () =>
    Effect.gen(function*() {
      const released = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      // the call ignores interruption until `released` (like a fiber awaiting a hung peer)
      const stubborn = Effect.uninterruptible(Deferred.await(released)).pipe(
        Effect.zipRight(Effect.never),
        Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
      )
      const startedAt = Date.now()
      const result = yield* Effect.either(withRealDeadline(stubborn, 50, (late) => `late ${late}`))
      const took = Date.now() - startedAt
      expect(Either.isLeft(result) && result.left.startsWith("late ")).toBe(true)
      expect(took).toBeLessThan(1000)
      expect(yield* Deferred.isDone(interrupted)).toBe(false)
      yield* Deferred.succeed(released, undefined)
      yield* Deferred.await(interrupted)
    }))

  it.live("passes the call's own answer and failure on", () =>
    Effect.gen(function*() {
      expect(yield* withRealDeadline(Effect.succeed(7), 1000, () => "late")).toBe(7)
      expect(yield* Effect.either(withRealDeadline(Effect.fail("own"), 1000, () => "late"))).toEqual(Either.left("own"))
    }))

  it.live("interrupting the caller interrupts the call", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const caller = yield* Effect.fork(
        withRealDeadline(Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))), 60_000, () => "late")
      )
      yield* Effect.sleep("10 millis")
      expect(Exit.isInterrupted(yield* Fiber.interrupt(caller))).toBe(true)
      yield* Deferred.await(interrupted)
    }))
})
