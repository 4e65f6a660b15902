/**
 * The scheduler (D15): one loop per process fires the due schedules (`Schedules.fireNext`, one
 * transaction per scheduled time, `FOR UPDATE SKIP LOCKED`, so every replica may run it and each
 * scheduled time starts one run), then hands each started run to its cell, which starts its actor.
 * A process that dies between the commit and the hand-over leaves a queued run: recovery starts it
 * at the next start (src/Runtime/Recovery.ts).
 *
 * Fair across environments (D20): the due schedules are fired in rounds, each round one schedule of
 * every environment that has one due (`Schedules.dueCells`, the longest-waiting environment first),
 * so an environment with a hundred due schedules delays another's first one by at most one firing
 * of each environment with due schedules, not by its hundred. A round costs one query more than its
 * firings (the list of environments); an idle look costs what it did (one query).
 *
 * Due-ness is Effect's Clock, passed into SQL (never the database's `now()`), so suites drive it
 * with TestClock. The loop sleeps until the earliest `next_run_at`, at most SCHEDULER_POLL_MILLIS;
 * `LISTEN schedules` (a schedule created, changed or fired anywhere) wakes it at once. With no
 * active schedule it waits for that notification alone (and a real-time look every minute).
 */
import { Clock, Duration, Effect, Layer, Queue, Stream } from "effect"

import { Cells, tellVia } from "../Cells/Cells.js"
import { StartRun } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { Notifications } from "../Database/Listener.js"
import { realPause } from "../Kernel/RealTime.js"
import { Schedules } from "../Schedules.js"

/**
 * A schedule due now that this pass did not fire is held by another process's transaction (or was
 * read before it became due): look again after this pause, in real time, not the Clock's.
 */
const heldPause = realPause(25)

/**
 * With no active schedule the loop waits for a notification, and looks again after this much real
 * time in case one was lost: not on the Clock, so a suite that moves TestClock by days does not
 * wake an idle scheduler once per poll interval of those days.
 */
const IDLE_LOOK_MILLIS = 60_000

const scheduler = Effect.gen(function*() {
  const { pollMillis } = (yield* AppConfig).schedules
  const schedules = yield* Schedules
  const cells = yield* Cells
  const notifications = yield* Notifications
  const wake = yield* Queue.sliding<void>(1)

  // a notification, or LISTEN (re)connected (one may have been missed): look again
  yield* notifications.listen("schedules").pipe(
    Stream.runForEach(() => Queue.offer(wake, undefined)),
    Effect.forkScoped
  )

  /**
   * Fires every due schedule this process gets, in rounds of one per environment; how many runs it
   * started. Ends when nothing is due, or when a round fired nothing (what is due is held by
   * another process's transactions: `waitForWork` looks again after a moment).
   */
  const fireDue = Effect.gen(function*() {
    let started = 0
    while (true) {
      const round = yield* schedules.dueCells(new Date(yield* Clock.currentTimeMillis))
      let fired = 0
      for (const cell of round) {
        const firing = yield* schedules.fireNext(new Date(yield* Clock.currentTimeMillis), cell)
        if (firing === undefined) continue
        fired++
        if (firing._tag === "Fired") {
          started++
          // Handed over without waiting: a cell that is moving (up to CLUSTER_SEND_TIMEOUT_SECONDS)
          // must not hold up the next scheduled times; its new owner resumes the run anyway.
          yield* tellVia(cells, firing.cell, new StartRun({ runId: firing.runId })).pipe(
            Effect.forkDaemon,
            Effect.annotateLogs({ schedule_id: firing.scheduleId, run_id: firing.runId })
          )
        }
      }
      if (fired === 0) return started
    }
  })

  /** Until the earliest due time, the poll, or a notification; a moment when what is due now is held elsewhere. */
  const waitForWork = Effect.gen(function*() {
    const due = yield* schedules.nextDue
    const now = yield* Clock.currentTimeMillis
    if (due === undefined) return yield* Effect.raceFirst(Queue.take(wake), realPause(IDLE_LOOK_MILLIS))
    if (due.getTime() <= now) return yield* heldPause
    const wait = Math.min(pollMillis, due.getTime() - now)
    yield* Effect.raceFirst(Queue.take(wake), Effect.sleep(Duration.millis(wait)))
  })

  yield* Effect.zipRight(fireDue, waitForWork).pipe(
    Effect.catchAllCause((cause) =>
      Effect.zipRight(Effect.logWarning("scheduler pass failed", cause), Effect.sleep(Duration.millis(pollMillis)))
    ),
    Effect.forever,
    Effect.forkScoped
  )
})

/** The scheduler of this process (needs the Schedules service, the cells, AppConfig and Notifications). */
export const SchedulerLive = Layer.scopedDiscard(scheduler)
