/**
 * The SSE body of `streamRunEvents` (contract part 6, D8).
 *
 * Frames: `id: <event id>`, `event: <type>`, `data: <event JSON>` (encoded by
 * `@effect/experimental/Sse`), and a `: ping` comment at least every ping interval (15 s). It
 * starts after the given sequence (0: the run's first event), reads history from the database,
 * then follows the event bus; any gap in sequences is filled from the database, and each ping
 * interval without news re-reads the database too, so an event is never skipped or sent twice.
 * It ends after a terminal event (except `run.outcome_unknown`, which a `run.reconciled` receipt
 * may follow), when the key that opened it is revoked (checked every few seconds, so within 15 s),
 * or when the client goes away; the cell's stream slot is released in every case.
 */
import * as Sse from "@effect/experimental/Sse"
import { Clock, Duration, Effect, Option, Queue, Stream } from "effect"

import { Cells } from "../Cells/Cells.js"
import { CloseStream } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { TERMINAL_STATUSES } from "../Domain/RunState.js"
import type { Principal } from "../Kernel/Principal.js"
import { recordStreamLag } from "../Observability/Metrics.js"
import { Platform } from "../Platform.js"
import { EventBus } from "./EventBus.js"
import { type EventRow, RunStore, toEvent } from "./RunStore.js"

const END = Symbol("end")
const PAGE = 500

/** Events after which the stream may end: a terminal outcome nothing can follow (a `run.reconciled` receipt may follow `outcome_unknown`). */
const ENDS_STREAM = new Set(TERMINAL_STATUSES.filter((s) => s !== "outcome_unknown").map((s) => `run.${s}`))

export const frame = (row: EventRow): string =>
  Sse.encoder.write({ _tag: "Event", event: row.type, id: row.id, data: JSON.stringify(toEvent(row)) })

export const eventStream = (p: Principal, runId: string, after: number) =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const repo = yield* RunStore
    const platform = yield* Platform
    const bus = yield* EventBus
    const cells = yield* Cells
    const config = yield* AppConfig
    // The slot was taken by Runs.openStream before the response started.
    yield* Effect.addFinalizer(() =>
      cells.send({ tenantId: p.tenantId, environment: p.environment }, new CloseStream({ actorId: p.actor.id }))
    )
    const events = yield* bus.subscribe(runId)
    // Rows are framed as they are written, which is when their lag from the commit is measured
    // (the history a stream starts with is sent framed: its age is not a delay).
    const out = yield* Queue.bounded<string | EventRow | typeof END>(256)
    let last = after

    /** Sends rows in order from the database, starting after `last`; `true` once a final event is sent. */
    const catchUp = (history: boolean): Effect.Effect<boolean, unknown> =>
      Effect.gen(function*() {
        while (true) {
          const rows = yield* repo.eventsAfter(runId, last, PAGE)
          for (const row of rows) {
            yield* Queue.offer(out, history ? frame(row) : row)
            last = row.sequence
            if (ENDS_STREAM.has(row.type)) return true
          }
          if (rows.length < PAGE) return false
        }
      })

    /**
     * One fiber per stream (issue 20: idle streams were three fibers and a race each): it follows
     * the bus, sends `: ping` every ping interval, re-reads the database after a ping interval
     * without news, and checks the key every `streamAuthCheckSeconds`, whichever is due next.
     */
    const pingMs = config.runs.pingSeconds * 1000
    const checkMs = config.runs.streamAuthCheckSeconds * 1000
    const follow = Effect.gen(function*() {
      if (yield* catchUp(true)) return
      const opened = yield* Clock.currentTimeMillis
      let nextPing = opened + pingMs
      let nextCheck = opened + checkMs
      let nextCatchUp = opened + pingMs
      while (true) {
        const now = yield* Clock.currentTimeMillis
        if (now >= nextPing) {
          yield* Queue.offer(out, ": ping\n\n")
          nextPing = now + pingMs
        }
        if (now >= nextCheck) {
          if (!(yield* platform.keyActive(p.keyId))) return
          nextCheck = now + checkMs
        }
        if (now >= nextCatchUp) {
          // notifications can be lost (a replaced LISTEN connection)
          if (yield* catchUp(false)) return
          nextCatchUp = now + pingMs
        }
        const wait = Math.max(1, Math.min(nextPing, nextCheck, nextCatchUp) - now)
        const next = yield* Effect.timeoutOption(Queue.take(events), Duration.millis(wait))
        if (Option.isNone(next)) continue
        nextCatchUp = (yield* Clock.currentTimeMillis) + pingMs
        const row = next.value
        if (row.sequence <= last) continue
        if (row.sequence > last + 1) {
          if (yield* catchUp(false)) return
          continue
        }
        yield* Queue.offer(out, row)
        last = row.sequence
        if (ENDS_STREAM.has(row.type)) return
      }
    })

    // Its end ends the stream (its own failure included, after a log line).
    yield* follow.pipe(
      Effect.tapErrorCause((cause) => Effect.logWarning("event stream stopped", cause)),
      Effect.exit,
      Effect.ensuring(Queue.offer(out, END)),
      Effect.forkScoped
    )
    return Stream.fromQueue(out).pipe(
      Stream.takeWhile((item): item is string | EventRow => item !== END),
      Stream.mapEffect((item) =>
        typeof item === "string"
          ? Effect.succeed(item)
          : Effect.as(Effect.flatMap(Clock.currentTimeMillis, (now) => recordStreamLag(item.created_at, now)), frame(item))
      ),
      Stream.encodeText
    )
  }))
