/** Waiting in tests: real-time settles between probes, and TestClock advanced step by step. */
import { Effect, TestClock } from "effect"

/** Real time passing (not the test's Clock). */
export const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Lets real IO (HTTP, Postgres) progress: a yield plus 50 ms of real time. */
export const settle = Effect.zipRight(Effect.yieldNow(), realSleep(50))

/** Probes until `check` holds (at most `tries` times, `settle` between); returns the last value. */
export const eventually = <A, E, R>(probe: Effect.Effect<A, E, R>, check: (a: A) => boolean, tries = 100) =>
  Effect.gen(function*() {
    let last = yield* probe
    for (let i = 0; i < tries && !check(last); i++) {
      yield* settle
      last = yield* probe
    }
    return last
  })

/** Moves TestClock a step at a time, letting real IO finish, until `check` holds. */
export const advanceUntil = <A, E, R>(step: string, probe: Effect.Effect<A, E, R>, check: (a: A) => boolean, maxSteps = 120) =>
  Effect.gen(function*() {
    let last = yield* probe
    for (let i = 0; i < maxSteps && !check(last); i++) {
      yield* TestClock.adjust(step as any)
      yield* settle
      last = yield* probe
    }
    return last
  })
