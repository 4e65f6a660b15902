/**
 * The SSE body of `streamRunEvents` (contract part 6, D8).
 *
 * Frames: `id: <event id>`, `event: <type>`, `data: <event JSON>` (encoded by
 * `@effect/experimental/Sse`), and a `: ping` comment at least every ping interval (15 s). It
 * starts after the given sequence (0: the run's first event), reads history from the database,
 * then follows the event bus; any gap in sequences is filled from the database, and so is whatever
 * the bus says may have gone unannounced (its LISTEN connection was replaced), so an event is never
 * skipped or sent twice.
 * It ends after a terminal event (except `run.outcome_unknown`, which a `run.reconciled` receipt
 * may follow), when the key that opened it is revoked (checked every few seconds, so within 15 s),
 * or when the client goes away; the cell's stream slot is released in every case.
 *
 * Issue 20 (10,000 idle streams): an open stream is a small object, not a fiber. The body is a
 * Node `Readable` the response pipes; the bus calls the stream with each committed row, which it
 * frames at once when it is the next one; one ticker of the hub sends the pings and starts the
 * key checks that are due, one per key for all its streams due in that tick. Only a database read
 * or a key check runs as a fiber, for as long as it takes; an idle stream reads nothing (it used
 * to re-read the database every quiet ping interval in case a notification was lost: 670 reads/s
 * for 10,000 idle streams). A client that reads slower than events come fills the body's buffer:
 * the stream then stops taking rows from the bus and reads them from the database once the client
 * has drained it (the bus never waits for a stream).
 */
import * as Sse from "@effect/experimental/Sse"
import { Effect, FiberSet } from "effect"
import { Readable } from "node:stream"

import { Cells } from "../Cells/Cells.js"
import { CloseStream } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { TERMINAL_STATUSES } from "../Domain/RunState.js"
import type { Principal } from "../Kernel/Principal.js"
import { recordStreamLag } from "../Observability/Metrics.js"
import { Platform } from "../Platform.js"
import { type BusListener, EventBus } from "./EventBus.js"
import { type EventRow, RunStore, toEvent } from "./RunStore.js"

const PAGE = 500
/** How often the hub looks for due pings and key checks. */
const TICK_MS = 250
/** A body its response has not started reading after this long is let go (its slot too). */
const UNREAD_MS = 10_000

/** Events after which the stream may end: a terminal outcome nothing can follow (a `run.reconciled` receipt may follow `outcome_unknown`). */
const ENDS_STREAM = new Set(TERMINAL_STATUSES.filter((s) => s !== "outcome_unknown").map((s) => `run.${s}`))

/** A row's frame, made once for all the streams the bus hands the same row to. */
const framed = new WeakMap<EventRow, string>()

export const frame = (row: EventRow): string => {
  let text = framed.get(row)
  if (text === undefined) {
    text = Sse.encoder.write({ _tag: "Event", event: row.type, id: row.id, data: JSON.stringify(toEvent(row)) })
    framed.set(row, text)
  }
  return text
}

const PING = ": ping\n\n"

/** What a stream needs of the hub (exported for the stream's tests). */
export interface Hub {
  readonly fork: (effect: Effect.Effect<void, unknown>) => void
  readonly now: () => number
  readonly pingMs: number
  readonly checkMs: number
  readonly eventsAfter: (runId: string, after: number) => Effect.Effect<ReadonlyArray<EventRow>, unknown>
  /** Checks the stream's key, later; then calls `stream.checked` with whether it is still active. */
  readonly checkKey: (stream: EventStream) => void
  readonly listen: (runId: string, listener: BusListener) => () => void
  readonly closed: (stream: EventStream) => void
  readonly lag: (row: EventRow) => void
}

/** One open stream: its body, where it is in the run, and what is due when (exported for its tests). */
export class EventStream {
  readonly body: Readable
  private last: number
  private nextPing = 0
  private nextCheck = 0
  private started = false
  private readonly openedAt: number
  /** a database read or a key check is running */
  private busy = false
  /** a row came while busy or paused: read the database again */
  private again = false
  /** the body's buffer is full: rows are read from the database once the client drained it */
  private paused = false
  private ended = false
  private unlisten: (() => void) | undefined

  constructor(
    private readonly hub: Hub,
    readonly p: Principal,
    private readonly runId: string,
    after: number,
    highWaterMark?: number
  ) {
    this.last = after
    this.openedAt = hub.now()
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this
    this.body = new Readable({
      ...(highWaterMark === undefined ? {} : { highWaterMark }),
      read() {
        self.resume()
      },
      destroy(error, callback) {
        self.end(false)
        callback(error)
      }
    })
  }

  /** The response reads: the first time, the stream starts; after a full buffer, it catches up. */
  private resume() {
    if (this.ended) return
    if (!this.started) {
      this.started = true
      const now = this.hub.now()
      this.nextPing = now + this.hub.pingMs
      this.nextCheck = now + this.hub.checkMs
      // Subscribed before the history is read, so nothing committed meanwhile is missed.
      this.unlisten = this.hub.listen(this.runId, { row: (row) => this.onRow(row), missed: () => this.missed() })
      this.catchUp(true)
    } else if (this.paused) {
      this.paused = false
      if (this.again) this.catchUp(false)
    }
  }

  /** Sends `chunk`; a full buffer pauses the stream. */
  private push(chunk: string) {
    if (!this.body.push(chunk)) this.paused = true
  }

  /** Frames `row`; `true` when the stream is over. */
  private send(row: EventRow, live: boolean) {
    if (live) this.hub.lag(row)
    this.last = row.sequence
    this.push(frame(row))
    if (ENDS_STREAM.has(row.type)) {
      this.end(true)
      return true
    }
    return false
  }

  private onRow(row: EventRow) {
    if (this.ended) return
    if (this.busy || this.paused) {
      this.again = true
      return
    }
    if (row.sequence <= this.last) return
    if (row.sequence > this.last + 1) this.catchUp(false)
    else this.send(row, true)
  }

  /** The bus may have lost rows of this run: read the database (now, or once busy or paused is over). */
  private missed() {
    if (this.ended) return
    if (this.busy || this.paused) this.again = true
    else this.catchUp(false)
  }

  /** Sends rows in order from the database after `last`, until none is left (or the buffer is full). */
  private catchUp(history: boolean) {
    this.busy = true
    this.again = false
    const page: Effect.Effect<void, unknown> = Effect.flatMap(this.hub.eventsAfter(this.runId, this.last), (rows) => {
      for (const row of rows) {
        if (this.ended || row.sequence <= this.last) continue
        if (this.send(row, !history)) return Effect.void
      }
      return rows.length === PAGE && !this.paused && !this.ended ? page : Effect.void
    })
    // the stream's one fiber; a failed read ends the stream after a log line
    this.hub.fork(
      page.pipe(
        Effect.matchCauseEffect({
          onFailure: (cause) =>
            Effect.zipRight(
              Effect.logWarning("event stream stopped", cause),
              Effect.sync(() => this.end(true))
            ),
          onSuccess: () => Effect.sync(() => void this.settle())
        }),
        Effect.annotateLogs({ run_id: this.runId })
      )
    )
  }

  /**
   * A read or a key check is over: the rows that came meanwhile (left to the database) are read.
   * True when nothing is left to do.
   */
  private settle() {
    this.busy = false
    if (this.ended) return false
    if (!this.again || this.paused) return true
    this.catchUp(false)
    return false
  }

  /** What is due at `now`: a ping (never later than the interval), a key check. */
  tick(now: number) {
    if (!this.started) {
      // A body the response never read (a HEAD, a client gone before the body started): let go.
      if (!this.ended && now - this.openedAt >= UNREAD_MS) this.body.destroy()
      return
    }
    if (this.ended || this.busy) return
    if (!this.paused && now + TICK_MS >= this.nextPing) {
      this.push(PING)
      this.nextPing = now + this.hub.pingMs
    }
    if (now >= this.nextCheck) {
      this.nextCheck = now + this.hub.checkMs
      this.busy = true
      this.hub.checkKey(this)
    }
  }

  /** The hub's answer to `checkKey`: whether the key is still active (`false` when the check failed). */
  checked(active: boolean) {
    if (!active) {
      this.busy = false
      return this.end(true)
    }
    if (this.settle()) this.tick(this.hub.now())
  }

  /** Ends the stream once: the body ends (`finish`) or was destroyed, the bus and the slot are let go. */
  end(finish: boolean) {
    if (this.ended) return
    this.ended = true
    this.unlisten?.()
    if (finish) this.body.push(null)
    this.hub.closed(this)
  }
}

/** The open streams of this process, and their ticker. */
export class StreamHub extends Effect.Service<StreamHub>()("StreamHub", {
  scoped: Effect.gen(function*() {
    const repo = yield* RunStore
    const platform = yield* Platform
    const bus = yield* EventBus
    const cells = yield* Cells
    const config = yield* AppConfig
    const fork = yield* FiberSet.makeRuntime<never, void, unknown>()
    const open = new Set<EventStream>()
    const clock = yield* Effect.clock
    const now = () => clock.unsafeCurrentTimeMillis()

    /** Streams whose key check is due, by key: one check per key answers them all (at the tick's end). */
    const dueChecks = new Map<string, Array<EventStream>>()
    const checkDue = () => {
      for (const [keyId, streams] of dueChecks) {
        fork(
          platform.keyActive(keyId).pipe(
            Effect.matchCauseEffect({
              onFailure: (cause) =>
                Effect.zipRight(
                  Effect.logWarning("event streams stopped: their key could not be checked", cause),
                  Effect.sync(() => streams.forEach((s) => s.checked(false)))
                ),
              onSuccess: (active) => Effect.sync(() => streams.forEach((s) => s.checked(active)))
            }),
            Effect.annotateLogs({ key_id: keyId, streams: streams.length })
          )
        )
      }
      dueChecks.clear()
    }
    const hub: Hub = {
      fork: (effect) => void fork(effect),
      now,
      pingMs: config.runs.pingSeconds * 1000,
      checkMs: config.runs.streamAuthCheckSeconds * 1000,
      eventsAfter: (runId, after) => repo.eventsAfter(runId, after, PAGE),
      checkKey: (stream) => {
        const streams = dueChecks.get(stream.p.keyId)
        if (streams === undefined) dueChecks.set(stream.p.keyId, [stream])
        else streams.push(stream)
      },
      listen: bus.listen,
      closed: (stream) => {
        if (!open.delete(stream)) return
        // The slot was taken by Runs.streamEvents before the response started.
        const { p } = stream
        fork(cells.send({ tenantId: p.tenantId, environment: p.environment }, new CloseStream({ actorId: p.actor.id })))
      },
      lag: (row) => recordStreamLag(row.created_at, now())
    }

    /**
     * The ticker runs while a stream is open (a clock that jumps days in a test would otherwise
     * wake it every tick of the way).
     */
    let ticking = false
    const ticker = Effect.gen(function*() {
      while (true) {
        yield* Effect.sleep(TICK_MS)
        // checked and cleared in one step: a stream opening now starts the next ticker
        if (open.size === 0) {
          dueChecks.clear()
          return void (ticking = false)
        }
        const at = now()
        for (const stream of open) stream.tick(at)
        checkDue()
      }
    })
    // The process stops: every stream ends (its client sees the body end and may resume).
    yield* Effect.addFinalizer(() => Effect.sync(() => [...open].forEach((s) => s.end(true))))

    return {
      /** The body of a stream of `runId` after sequence `after`; its cell's slot is released when it ends. */
      open: (p: Principal, runId: string, after: number) =>
        Effect.sync(() => {
          const stream = new EventStream(hub, p, runId, after)
          open.add(stream)
          if (!ticking) {
            ticking = true
            fork(ticker)
          }
          return stream.body
        })
    } as const
  }),
  dependencies: [EventBus.Default, Platform.Default]
}) {}
