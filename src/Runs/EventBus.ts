/**
 * Fan-out of committed run events to this process's streams and waiters.
 *
 * Every insert into `run_events` notifies channel `run_events` (a trigger; Postgres delivers it at
 * commit), so nothing is announced before it is durable, whichever process or node committed it.
 * One LISTEN connection per process; a notification carries the event when it fits in a NOTIFY
 * payload (else the event is read once from the database, only if someone here follows that
 * run), and is handed to each subscriber: offered to its bounded queue (`subscribe`: waiters), or
 * given to its callback (`listen`: SSE streams, which are not fibers). Subscribers never
 * rely on the bus alone: they read from the database after subscribing, and on any sequence gap
 * (a full queue dropped something, or the LISTEN connection was replaced) they read the missing
 * events from the database again.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Queue, Schedule, Stream } from "effect"

import { type EventRow, RunStore } from "./RunStore.js"

export class EventBus extends Effect.Service<EventBus>()("EventBus", {
  scoped: Effect.gen(function*() {
    const pg = yield* PgClient.PgClient
    const repo = yield* RunStore
    /** Per run, what each subscriber does with a row: offer it to its queue, or its own callback. */
    const subscribers = new Map<string, Set<(row: EventRow) => void>>()

    const deliver = (payload: string) =>
      Effect.gen(function*() {
        let note: { run_id?: unknown; sequence?: unknown; event?: any }
        try {
          note = JSON.parse(payload)
        } catch {
          return
        }
        if (typeof note.run_id !== "string" || typeof note.sequence !== "number") return
        const listeners = subscribers.get(note.run_id)
        if (!listeners || listeners.size === 0) return
        // The event travels in the notification when it fits (migration 0006); else it is read.
        const row: EventRow | undefined = note.event
          ? {
            id: note.event.id,
            run_id: note.run_id,
            sequence: note.sequence,
            type: note.event.type,
            data: note.event.data,
            created_at: new Date(note.event.created_at)
          }
          : (yield* repo.eventsAfter(note.run_id, note.sequence - 1, 1)).find((r) => r.sequence === note.sequence)
        if (!row) return
        for (const listener of listeners) listener(row)
      }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("run event fan-out failed", cause)))

    yield* pg.listen("run_events").pipe(
      Stream.runForEach(deliver),
      Effect.tapErrorCause((cause) => Effect.logWarning("run_events listener lost; reconnecting", cause)),
      Effect.retry(Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))),
      Effect.forkScoped
    )

    /**
     * Calls `onRow` with each event of `runId` committed from now on, until the returned function is
     * called; `onRow` runs synchronously in the fan-out, so it must only take note (SSE streams).
     */
    const listen = (runId: string, onRow: (row: EventRow) => void) => {
      let set = subscribers.get(runId)
      if (!set) subscribers.set(runId, set = new Set())
      set.add(onRow)
      return () => {
        const set = subscribers.get(runId)
        set?.delete(onRow)
        if (set && set.size === 0) subscribers.delete(runId)
      }
    }

    /** Events of `runId` committed from now on (bounded; a slow subscriber sees gaps, not stalls). */
    const subscribe = (runId: string) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          const q = Effect.runSync(Queue.sliding<EventRow>(1024))
          return { q, unlisten: listen(runId, (row) => void q.unsafeOffer(row)) }
        }),
        ({ q, unlisten }) => Effect.sync(unlisten).pipe(Effect.zipRight(Queue.shutdown(q)))
      ).pipe(Effect.map(({ q }) => q as Queue.Dequeue<EventRow>))

    return { subscribe, listen } as const
  })
}) {}
