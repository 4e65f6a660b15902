/**
 * Fan-out of committed run events to this process's streams and waiters.
 *
 * Every statement that inserts into `run_events` notifies channel `run_events` once, with the
 * notes of the events it wrote (a statement-level trigger, migration 0029; Postgres delivers it at
 * commit), so nothing is announced before it is durable, whichever process or node committed it.
 * A run's `run.queued` (its admission's) is not announced (migration 0034): nobody can follow a run
 * before its admission committed, and a subscriber reads what came before from the database.
 * One LISTEN connection per process; a notification carries the events when they fit in a NOTIFY
 * payload (else the event is read once from the database, only if someone here follows that
 * run), and is handed to each subscriber's listener (`listen`: SSE streams, which are not fibers;
 * `follow`: waiters, woken only by their run's end). Subscribers never rely on the bus alone: they
 * read from the database after subscribing, and on any sequence gap they read the missing events
 * from the database again. The
 * LISTEN connection (`Notifications`) tells when it was replaced, or first became active: what was
 * committed before may have gone unannounced, so every listener is told it `missed` events, and
 * reads once; so is a run's listener when a notification of that run could not be handed over.
 */
import { Effect, Runtime } from "effect"

import { type Notice, Notifications } from "../Database/Listener.js"
import { Listeners } from "../Kernel/Listeners.js"
import { type EventRow, RunStore } from "./RunStore.js"

/** What a waiter is told when events of its run may have gone unannounced. */
export const MISSED = "missed" as const
/** What a waiter is told when its deadline passed. */
export const EXPIRED = "expired" as const
/** What wakes a waiter: its run's end, word of a miss, its deadline. */
export type FollowSignal = "ended" | typeof MISSED | typeof EXPIRED

/** A waiter's following of one run (`EventBus.follow`). */
export interface Followed {
  /** the next signal since the last one */
  readonly next: Effect.Effect<FollowSignal>
  /** ends the following */
  readonly stop: () => void
  /** the waiter's deadline passed: `next` answers EXPIRED */
  readonly expire: () => void
}

/** A listener of one run's events: each committed row, or word that some may have been missed. */
export interface BusListener {
  readonly row: (row: EventRow) => void
  readonly missed: () => void
}

export class EventBus extends Effect.Service<EventBus>()("EventBus", {
  scoped: Effect.gen(function*() {
    const notifications = yield* Notifications
    const repo = yield* RunStore
    /** Per run, its listeners: a waiter, or an SSE stream. */
    const subscribers = new Listeners<string, BusListener>()

    type Note = { readonly run_id?: unknown; readonly sequence?: unknown; readonly event?: any }

    /** The run's listeners told of a row, or that some of its events may have been missed. */
    const hand = (runId: string, row: EventRow) => {
      for (const listener of subscribers.of(runId)) listener.row(row)
    }
    const missedOf = (runId: string) => {
      for (const listener of subscribers.of(runId)) listener.missed()
    }

    /** The row of a note whose event travelled in it (migrations 0006, 0029). */
    const rowOf = (runId: string, sequence: number, event: any): EventRow => ({
      id: event.id,
      run_id: runId,
      sequence,
      type: event.type,
      data: event.data,
      created_at: new Date(event.created_at)
    })

    /** A note whose event did not fit in it: its row read, then handed (a failed read: they are told they missed it). */
    const readNote = (runId: string, sequence: number) =>
      Effect.map(repo.eventsAfter(runId, sequence - 1, 1), (rows) => {
        const row = rows.find((r) => r.sequence === sequence)
        if (row !== undefined) hand(runId, row)
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.zipRight(Effect.logWarning("run event fan-out failed", cause), Effect.sync(() => missedOf(runId)))
        )
      )

    /**
     * A notification's notes (`{"events": [...]}`, migration 0029; or one event's note, before it),
     * handed over in the connection's callback: each followed run's rows from the notes, at once.
     * A note without its event needs a read: it and the notes after it are handed over by that
     * work, and so are the notifications that come meanwhile (`backlog`), in order.
     */
    let reading = false
    /** What came while a read was under way, in order: notes, or LISTEN active again. */
    const backlog: Array<ReadonlyArray<Note> | "listening"> = []
    const runtime = yield* Effect.runtime<never>()
    const fork = Runtime.runFork(runtime)

    const handOver = (item: ReadonlyArray<Note> | "listening") => {
      if (reading) return void backlog.push(item)
      if (item === "listening") {
        // LISTEN is active again (or for the first time): every listener reads what it may have missed
        for (const listener of subscribers.all()) listener.missed()
        return
      }
      for (let i = 0; i < item.length; i++) {
        const note = item[i]
        if (note === null || typeof note !== "object") continue
        const { event, run_id: runId, sequence } = note
        // nobody here follows this run: nothing to do (the usual case on a busy node)
        if (typeof runId !== "string" || typeof sequence !== "number" || !subscribers.has(runId)) continue
        if (event) {
          hand(runId, rowOf(runId, sequence, event))
          continue
        }
        reading = true
        backlog.unshift(item.slice(i + 1))
        fork(
          readNote(runId, sequence).pipe(
            Effect.ensuring(Effect.sync(() => {
              reading = false
              while (backlog.length > 0 && !reading) handOver(backlog.shift()!)
            }))
          )
        )
        return
      }
    }

    const noticed = (notice: Notice) => {
      if (notice._tag === "Listening") return handOver("listening")
      let parsed: Note & { readonly events?: unknown }
      try {
        parsed = JSON.parse(notice.payload)
      } catch {
        return
      }
      handOver(Array.isArray(parsed.events) ? parsed.events : [parsed])
    }

    yield* notifications.onNotice("run_events", noticed)

    /**
     * Hands `listener` each event of `runId` committed from now on, until the returned function is
     * called; it is called synchronously in the fan-out, so it must only take note (SSE streams).
     */
    const listen = (runId: string, listener: BusListener) => subscribers.add(runId, listener)

    /**
     * Follows `runId` for a waiter (`Prefer: wait`): `next` answers "ended" for a committed event
     * that `ends` accepts, `MISSED` when some may have gone unannounced (the waiter then reads the
     * run), or `EXPIRED` once `expire` was called (the waiter's deadline, an alarm: no timer fiber),
     * whichever came first since the last `next` (an end outranks the others, an expiry a miss);
     * the run's other events wake nobody. `stop` ends the following.
     */
    const follow = (runId: string, ends: (row: EventRow) => boolean): Followed => {
      let noted: FollowSignal | undefined
      let waiting: ((signal: FollowSignal) => void) | undefined
      const note = (signal: FollowSignal) => {
        if (waiting !== undefined) {
          const wake = waiting
          waiting = undefined
          wake(signal)
        } else if (noted !== "ended" && !(noted === EXPIRED && signal === MISSED)) noted = signal
      }
      const stop = listen(runId, { row: (row) => ends(row) && note("ended"), missed: () => note(MISSED) })
      const expire = () => note(EXPIRED)
      const next = Effect.async<FollowSignal>((resume) => {
        if (noted !== undefined) {
          const signal = noted
          noted = undefined
          return resume(Effect.succeed(signal))
        }
        waiting = (signal) => resume(Effect.succeed(signal))
        return Effect.sync(() => (waiting = undefined))
      })
      return { next, stop, expire }
    }

    return { follow, listen } as const
  })
}) {}
