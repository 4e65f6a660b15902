/**
 * The service's metrics (issue 15, deliverable 4), on Effect's `Metric` module: defined here once,
 * recorded where the work happens, rendered for Prometheus by `Prometheus.ts` at `GET /metrics`
 * (docs/operations.md lists them). Metrics are global to the process. Labels stay bounded: an
 * operation is the HttpApi endpoint's name (never a raw path with ids), a run's statuses and event
 * types are closed sets.
 */
import { Effect, Metric, MetricBoundaries, MetricLabel } from "effect"

/** Seconds, from 5 ms to 60 s (request latency; event-to-stream lag). */
const SECONDS = MetricBoundaries.fromIterable([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])

export const httpRequestsTotal = Metric.counter("http_requests_total", {
  description: "HTTP requests answered, by operation (the HttpApi endpoint's name), method and status",
  incremental: true
})

export const httpRequestDuration = Metric.histogram(
  "http_request_duration_seconds",
  SECONDS,
  "Time to answer an HTTP request (until the response starts: an event stream's life is not counted), by operation"
)

export const runTransitionsTotal = Metric.counter("run_transitions_total", {
  description: "Committed changes of a run's status, by from and to (admission: from=\"none\", to=\"queued\")",
  incremental: true
})

export const runEventsTotal = Metric.counter("run_events_total", {
  description: "Committed run events, by type",
  incremental: true
})

export const cellsActive = Metric.gauge("cells_active", { description: "Cells running in this process" })

export const runActorsActive = Metric.gauge("run_actors_active", { description: "Run actors running in this process" })

export const eventStreamLag = Metric.histogram(
  "event_stream_lag_seconds",
  SECONDS,
  "Time from a run event's commit (its created_at) to its frame being written to an SSE stream"
)

export const dbPoolConnections = Metric.gauge("db_pool_connections", {
  description: "Connections of the Postgres pool, by state: in_use (lent to a query or transaction) or idle"
})

export const dbPoolWaiting = Metric.gauge("db_pool_waiting_requests", {
  description: "Queries and transactions waiting for a pool connection (all are in use)"
})

export const dbPoolMax = Metric.gauge("db_pool_max_connections", { description: "The pool's size (DB_POOL_SIZE)" })

/** Seconds, from 0.5 ms to 30 s: the wait for a share (most are none). */
const WAIT_SECONDS = MetricBoundaries.fromIterable([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])

export const shareWait = Metric.histogram(
  "share_wait_seconds",
  WAIT_SECONDS,
  "Time a unit of work waited for its cell's share of a node resource (db, steps, outbound, bytes), by resource; " +
    "by cell too when METRICS_CELL_LABELS is on"
)

export const shareInUse = Metric.gauge("share_in_use", {
  description: "Units of a node resource granted now, by resource (and cell when METRICS_CELL_LABELS is on)"
})

export const shareWaiting = Metric.gauge("share_waiting", {
  description: "Units of work waiting for their cell's share of a node resource, by resource (and cell when METRICS_CELL_LABELS is on)"
})

export const shareCapacity = Metric.gauge("share_capacity", { description: "Units of a node resource granted at once, by resource" })

/**
 * Tagged metrics resolved once per label set (issue 37): `Metric.tagged` makes a new metric key
 * (its labels hashed and formatted) at each call, so the hot ones are made once and kept, and
 * updated directly (no metric labels are set on fibers here). The label sets are bounded (an
 * operation, a method, a status; an event type; two statuses; a share's resource, and its cell when
 * the operator turned cell labels on).
 */
const resolvedOnce = <M>(make: (labels: ReadonlyArray<string>) => M) => {
  const made = new Map<string, M>()
  return (...labels: ReadonlyArray<string>): M => {
    const key = labels.join("\u0000")
    let metric = made.get(key)
    if (metric === undefined) {
      metric = make(labels)
      made.set(key, metric)
    }
    return metric
  }
}

/** One grant of a share (recorded at once: the database pool grants outside any fiber). */
export const recordShareWait = (resource: string, cell: string | undefined, waitedMillis: number): void =>
  (cell === undefined ? shareWaitBy(resource) : shareWaitOfCell(resource, cell)).unsafeUpdate(waitedMillis / 1000, [])

const shareWaitBy = resolvedOnce(([resource]) => Metric.tagged(shareWait, "resource", resource!))
const shareWaitOfCell = resolvedOnce(([resource, cell]) =>
  Metric.taggedWithLabels(shareWait, [MetricLabel.make("resource", resource!), MetricLabel.make("cell", cell!)])
)

/** The shares as they are at a scrape. */
export const recordShares = (
  shares: ReadonlyArray<{
    readonly resource: string
    readonly capacity: number
    readonly inUse: number
    readonly waiting: number
    readonly cells?: ReadonlyArray<{ readonly key: string; readonly inUse: number; readonly waiting: number }>
  }>
): Effect.Effect<void> =>
  Effect.all(
    shares.flatMap((s) => [
      Metric.set(Metric.tagged(shareCapacity, "resource", s.resource), s.capacity),
      Metric.set(Metric.tagged(shareInUse, "resource", s.resource), s.inUse),
      Metric.set(Metric.tagged(shareWaiting, "resource", s.resource), s.waiting),
      ...(s.cells ?? []).flatMap((c) => {
        const labels = [MetricLabel.make("resource", s.resource), MetricLabel.make("cell", c.key)]
        return [
          Metric.set(Metric.taggedWithLabels(shareInUse, labels), c.inUse),
          Metric.set(Metric.taggedWithLabels(shareWaiting, labels), c.waiting)
        ]
      })
    ]),
    { discard: true }
  )

/** The pool's counts, as read at a scrape. */
export const recordPool = (
  stats: { readonly max: number; readonly total: number; readonly idle: number; readonly waiting: number }
): Effect.Effect<void> =>
  Effect.all([
    Metric.set(Metric.tagged(dbPoolConnections, "state", "in_use"), stats.total - stats.idle),
    Metric.set(Metric.tagged(dbPoolConnections, "state", "idle"), stats.idle),
    Metric.set(dbPoolWaiting, stats.waiting),
    Metric.set(dbPoolMax, stats.max)
  ], { discard: true })

const requestsBy = resolvedOnce(([operation, method, status]) =>
  Metric.taggedWithLabels(httpRequestsTotal, [
    MetricLabel.make("operation", operation!),
    MetricLabel.make("method", method!),
    MetricLabel.make("status", status!)
  ])
)
const durationBy = resolvedOnce(([operation]) => Metric.tagged(httpRequestDuration, "operation", operation!))
const eventsBy = resolvedOnce(([type]) => Metric.tagged(runEventsTotal, "type", type!))
const transitionsBy = resolvedOnce(([from, to]) =>
  Metric.taggedWithLabels(runTransitionsTotal, [MetricLabel.make("from", from!), MetricLabel.make("to", to!)])
)

/** One answered request. */
export const recordRequest = (operation: string, method: string, status: number, seconds: number): Effect.Effect<void> =>
  Effect.sync(() => {
    requestsBy(operation, method, String(status)).unsafeUpdate(1, [])
    durationBy(operation).unsafeUpdate(seconds, [])
  })

/** A committed run change: its events in order, and the status changes they report. */
export const recordRunCommit = (
  from: string,
  events: ReadonlyArray<{ readonly type: string; readonly data: Record<string, unknown> }>
): Effect.Effect<void> =>
  Effect.sync(() => {
    let status = from
    for (const e of events) {
      eventsBy(e.type).unsafeUpdate(1, [])
      const to = e.data["status"]
      if (typeof to === "string" && to !== status) {
        transitionsBy(status, to).unsafeUpdate(1, [])
        status = to
      }
    }
  })

/** Counts `effect` in `gauge` while it runs (a cell's life, a run actor's). */
export const trackActive = <A, E, R>(gauge: Metric.Metric.Gauge<number>, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.acquireUseRelease(Metric.increment(gauge), () => effect, () => Metric.incrementBy(gauge, -1))

/**
 * One event frame written to an SSE stream, committed at `createdAt`, now `nowMillis`: recorded at
 * once (a stream is not a fiber, and this runs for every frame of every stream).
 */
export const recordStreamLag = (createdAt: Date, nowMillis: number): void =>
  eventStreamLag.unsafeUpdate(Math.max(0, nowMillis - createdAt.getTime()) / 1000, [])

/** Counts the current scope in `gauge` until it closes (a cell's life). */
export const activeInScope = (gauge: Metric.Metric.Gauge<number>) =>
  Effect.acquireRelease(Metric.increment(gauge), () => Metric.incrementBy(gauge, -1))
