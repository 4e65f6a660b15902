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
import { Effect, Stream } from "effect"

import { Notifications } from "../Database/Listener.js"
import { Listeners } from "../Kernel/Listeners.js"
import { type EventRow, RunStore } from "./RunStore.js"

/** What a waiter is told when events of its run may have gone unannounced. */
export const MISSED = "missed" as const

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

    /** One event's note: its row handed to the run's listeners (read first when it did not travel in the note). */
    const deliverNote = (note: { run_id?: unknown; sequence?: unknown; event?: any }) => {
      const { event, run_id: runId, sequence } = note
      if (typeof runId !== "string" || typeof sequence !== "number") return Effect.void
      if (!subscribers.has(runId)) return Effect.void
      // The event travels in the notification when it fits (migrations 0006, 0029); else it is read.
      const row: Effect.Effect<EventRow | undefined, unknown> = event
        ? Effect.succeed({
          id: event.id,
          run_id: runId,
          sequence,
          type: event.type,
          data: event.data,
          created_at: new Date(event.created_at)
        })
        : Effect.map(repo.eventsAfter(runId, sequence - 1, 1), (rows) => rows.find((r) => r.sequence === sequence))
      return row.pipe(
        Effect.map((row) => {
          if (row) { for (const listener of subscribers.of(runId)) listener.row(row) }
        }),
        Effect.catchAllCause((cause) =>
          Effect.zipRight(
            Effect.logWarning("run event fan-out failed", cause),
            Effect.sync(() => {
              for (const listener of subscribers.of(runId)) listener.missed()
            })
          )
        )
      )
    }

    /**
     * A notification: the notes of the events one statement wrote (`{"events": [...]}`, migration
     * 0029), or one event's note (before it).
     */
    const deliver = (payload: string) => {
      let notice: { events?: unknown; run_id?: unknown; sequence?: unknown; event?: any }
      try {
        notice = JSON.parse(payload)
      } catch {
        return Effect.void
      }
      if (!Array.isArray(notice.events)) return deliverNote(notice)
      const notes = notice.events as ReadonlyArray<{ run_id?: unknown; sequence?: unknown; event?: any }>
      // nobody here follows any of these runs: nothing to do (the usual case on a busy node)
      if (!notes.some((n) => typeof n?.run_id === "string" && subscribers.has(n.run_id))) return Effect.void
      return Effect.forEach(notes, (n) => (n === null || typeof n !== "object" ? Effect.void : deliverNote(n)), { discard: true })
    }

    /** LISTEN is active again (or for the first time): every listener reads what it may have missed. */
    const missedAll = Effect.sync(() => {
      for (const listener of subscribers.all()) listener.missed()
    })

    yield* notifications.listen("run_events").pipe(
      Stream.runForEach((notice) => notice._tag === "Listening" ? missedAll : deliver(notice.payload)),
      Effect.forkScoped
    )

    /**
     * Hands `listener` each event of `runId` committed from now on, until the returned function is
     * called; it is called synchronously in the fan-out, so it must only take note (SSE streams).
     */
    const listen = (runId: string, listener: BusListener) => subscribers.add(runId, listener)

    /**
     * Follows `runId` for a waiter (`Prefer: wait`): `next` answers "ended" for a committed event
     * that `ends` accepts, or `MISSED` when some may have gone unannounced (the waiter then reads
     * the run), whichever came first since the last `next` (an end outranks word of a miss); the
     * run's other events wake nobody. `stop` ends the following.
     */
    const follow = (runId: string, ends: (row: EventRow) => boolean) => {
      let noted: "ended" | typeof MISSED | undefined
      let waiting: ((signal: "ended" | typeof MISSED) => void) | undefined
      const note = (signal: "ended" | typeof MISSED) => {
        if (waiting !== undefined) {
          const wake = waiting
          waiting = undefined
          wake(signal)
        } else if (noted !== "ended") noted = signal
      }
      const stop = listen(runId, { row: (row) => ends(row) && note("ended"), missed: () => note(MISSED) })
      const next = Effect.async<"ended" | typeof MISSED>((resume) => {
        if (noted !== undefined) {
          const signal = noted
          noted = undefined
          return resume(Effect.succeed(signal))
        }
        waiting = (signal) => resume(Effect.succeed(signal))
        return Effect.sync(() => (waiting = undefined))
      })
      return { next, stop }
    }

    return { follow, listen } as const
  })
}) {}
