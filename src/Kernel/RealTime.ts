/**
 * A pause in real time, not on Effect's Clock: for the fallback looks of idle background loops
 * (a lost notification), so a suite that moves TestClock by days does not wake an idle loop once
 * per poll interval of those days. The timer does not keep the process alive.
 */
import { Effect } from "effect"

export const realPause = (millis: number): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), millis)
    timer.unref()
    return Effect.sync(() => clearTimeout(timer))
  })
