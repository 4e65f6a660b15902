/**
 * The process's event loop (issue 41): while it is blocked, nothing of the process runs, and a
 * request that reaches the server meanwhile is not even seen (Node's `request` event waits for the
 * loop), so its time never shows in `http_request_duration_seconds`. Two views of it:
 *
 *   - `nodejs_eventloop_delay_max_seconds` and `nodejs_eventloop_delay_p99_seconds`: the loop's
 *     delays since the previous scrape of `GET /metrics` (Node's `monitorEventLoopDelay`, 20 ms
 *     resolution), reset at each scrape; the max also counts the watchdog below, since Node's
 *     histogram takes no delay in its first interval after a reset (a block that began right after
 *     a scrape was lost: seen in CI);
 *   - a warning in the log when the loop was blocked for BLOCKED_WARN_MILLIS or more (a timer
 *     that fires every TICK_MILLIS and finds itself late): when, and for how long.
 */
import { monitorEventLoopDelay } from "node:perf_hooks"

import { Context, Effect, Layer, Metric, Runtime } from "effect"

export const eventLoopDelayMax = Metric.gauge("nodejs_eventloop_delay_max_seconds", {
  description: "The event loop's longest delay since the previous scrape"
})

export const eventLoopDelayP99 = Metric.gauge("nodejs_eventloop_delay_p99_seconds", {
  description: "The 99th percentile of the event loop's delays since the previous scrape"
})

/** A late tick of at least this much is logged as a blocked event loop. */
export const BLOCKED_WARN_MILLIS = 1000
/**
 * The watchdog's tick: a block that began some time after a tick shows as that tick's lateness,
 * up to one tick short of the block (at 250 ms, a 1.2 s block read 0.968 s once the histogram had
 * missed it: Metrics, in CI). Twenty wake-ups a second cost nothing that shows.
 */
const TICK_MILLIS = 50

export class EventLoop extends Context.Tag("EventLoop")<EventLoop, {
  /** Sets the delay gauges from the delays since the previous call, then starts over. */
  readonly record: Effect.Effect<void>
}>() {}

export const EventLoopLive = Layer.scoped(
  EventLoop,
  Effect.gen(function*() {
    const histogram = monitorEventLoopDelay({ resolution: 20 })
    histogram.enable()
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    let last = performance.now()
    /** the watchdog's longest lateness since the previous scrape (ms) */
    let worst = 0
    const timer = setInterval(() => {
      const now = performance.now()
      const blocked = now - last - TICK_MILLIS
      last = now
      if (blocked > worst) worst = blocked
      if (blocked >= BLOCKED_WARN_MILLIS) {
        runFork(Effect.logWarning(`the event loop was blocked for ${Math.round(blocked)} ms`))
      }
    }, TICK_MILLIS)
    timer.unref()
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        clearInterval(timer)
        histogram.disable()
      })
    )
    const record = Effect.suspend(() => {
      // nanoseconds; a histogram with no sample yet reads its max as 0 and its percentiles as NaN
      const max = Math.max(histogram.count === 0 ? 0 : histogram.max / 1e9, worst / 1000)
      const p99 = histogram.count === 0 ? 0 : histogram.percentile(99) / 1e9
      histogram.reset()
      worst = 0
      return Effect.zipRight(Metric.set(eventLoopDelayMax, max), Metric.set(eventLoopDelayP99, p99))
    })
    return { record }
  })
)
