/**
 * The node's alarms on Effect's Clock: a callback at a time, for a waiter that holds no fiber (a
 * `Prefer: wait` request's deadline). One loop sleeps until the earliest alarm; an alarm is an
 * entry in a map, so setting and cancelling one costs no fiber and no race (`Effect.timeout`
 * forks two fibers per call: the timed effect's and its timer's).
 *
 * The loop is woken only by an alarm earlier than the one it sleeps for: alarms set in time order
 * (the same wait for every request) never wake it, and a cancelled alarm is dropped when the loop
 * next looks. Time is the Clock's of the layer (TestClock in a test that builds it).
 */
import { Duration, Effect, Queue } from "effect"

/**
 * A timer loop's pause: until `next` (a time on the Clock, `now` read before; infinite: no time)
 * or until `changed` is offered (an earlier time was set), whichever comes first.
 */
export const sleepUntil = (next: number, now: number, changed: Queue.Dequeue<void>): Effect.Effect<void> =>
  next === Number.POSITIVE_INFINITY
    ? Queue.take(changed)
    : Effect.raceFirst(Queue.take(changed), Effect.sleep(Duration.millis(next - now)))

export class Alarms extends Effect.Service<Alarms>()("Alarms", {
  scoped: Effect.gen(function*() {
    const clock = yield* Effect.clock
    const pending = new Map<number, { readonly at: number; readonly fire: () => void }>()
    let nextId = 0
    /** When the loop wakes next (infinite: only when told). */
    let armedAt = Number.POSITIVE_INFINITY
    const changed = yield* Queue.sliding<void>(1)

    yield* Effect.gen(function*() {
      while (true) {
        armedAt = Number.POSITIVE_INFINITY
        const now = clock.unsafeCurrentTimeMillis()
        let next = Number.POSITIVE_INFINITY
        let threw: unknown = undefined
        for (const [id, alarm] of pending) {
          if (alarm.at <= now) {
            pending.delete(id)
            // a callback that throws (it must not) costs its own alarm, not the loop and the others
            try {
              alarm.fire()
            } catch (e) {
              threw = e
            }
          } else next = Math.min(next, alarm.at)
        }
        if (threw !== undefined) yield* Effect.logError("an alarm's callback threw", threw)
        armedAt = next
        yield* sleepUntil(next, now, changed)
      }
    }).pipe(Effect.interruptible, Effect.forkScoped)

    /**
     * Calls `fire` (synchronously, in the alarms' loop: it must only take note) `millis` from now on
     * the Clock, unless the returned function was called first.
     */
    const after = (millis: number, fire: () => void): () => void => {
      const id = nextId++
      const at = clock.unsafeCurrentTimeMillis() + millis
      pending.set(id, { at, fire })
      if (at < armedAt) {
        armedAt = at
        Queue.unsafeOffer(changed, undefined)
      }
      return () => void pending.delete(id)
    }

    return { after, pending: () => pending.size } as const
  })
}) {}
