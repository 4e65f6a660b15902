/**
 * `Effect.retry(effect, { schedule, while })` with the schedule's driver made only once `effect`
 * has failed: `Effect.retry` makes it before the first attempt, a few dozen effects on every
 * success of a hot path (a run's model step, its actor's supervision). The first failure is
 * handed to the schedule as `Effect.retry` would hand it, so the delays and the attempts are the
 * same.
 */
import { Effect, type Schedule } from "effect"

export const retried = <A, E, R, X, RS>(
  effect: Effect.Effect<A, E, R>,
  options: { readonly schedule: Schedule.Schedule<X, E, RS>; readonly while: (error: E) => boolean }
): Effect.Effect<A, E, R | RS> =>
  Effect.catchAll(effect, (first) => {
    if (!options.while(first)) return Effect.fail(first)
    let replay = true
    // its first attempt is the failure that happened: the schedule decides the wait before the second
    const again = Effect.suspend(() => {
      if (!replay) return effect
      replay = false
      return Effect.fail(first)
    })
    return Effect.retry(again, options)
  })
