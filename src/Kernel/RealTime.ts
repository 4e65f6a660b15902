/**
 * A pause in real time, not on Effect's Clock: for the fallback looks of idle background loops
 * (a lost notification), so a suite that moves TestClock by days does not wake an idle loop once
 * per poll interval of those days. The timer does not keep the process alive.
 */
import { Effect, FiberId } from "effect"

export const realPause = (millis: number): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), millis)
    timer.unref()
    return Effect.sync(() => clearTimeout(timer))
  })

/**
 * `self` with a deadline kept by a timer of its own, in real time: at `millis` the caller gets
 * `onTimeout(late)` (`late`: how long after `millis` the timer fired) at once, and `self`, run as a
 * daemon, is interrupted in the background. Unlike `Effect.timeout`, the answer waits neither for
 * a timer fiber to be scheduled nor for the timed-out fiber's interruption to end (a call to a
 * hung node, issue 41).
 */
export const withRealDeadline = <A, E, R, E2>(
  self: Effect.Effect<A, E, R>,
  millis: number,
  onTimeout: (late: number) => E2
): Effect.Effect<A, E | E2, R> =>
  Effect.flatMap(Effect.forkDaemon(self), (fiber) =>
    Effect.async<A, E | E2>((resume) => {
      let done = false
      const armedAt = Date.now()
      const timer = setTimeout(() => {
        if (done) return
        done = true
        fiber.unsafeInterruptAsFork(FiberId.none)
        resume(Effect.fail(onTimeout(Date.now() - armedAt - millis)))
      }, millis)
      fiber.addObserver((exit) => {
        if (done) return
        done = true
        clearTimeout(timer)
        resume(exit)
      })
      return Effect.sync(() => {
        done = true
        clearTimeout(timer)
        fiber.unsafeInterruptAsFork(FiberId.none)
      })
    }))
