/**
 * The run store's caches in Postgres (src/Runs/Repo.ts reads and fills them): rows this process
 * wrote, kept so that the next reader in this process need not read them again. Three maps, each
 * bounded (the oldest dropped), and each safe when another process writes the same run:
 *   - ended runs' rows, for their waiters (`ended`): an ended run's row never changes again;
 *   - admitted runs' rows, for their actors (`starting`): taken once and only while fresh, and the
 *     actor's commits are guarded by the run's version, so a run changed elsewhere meanwhile costs
 *     a read under its lock, never a lost write; with what their admission read for their first
 *     dispatch (`takeFirstRead`), which the actor trusts only if no key changed since;
 *   - unfinished runs' last-written rows, for their actors' next commits (`commitAll`): such a
 *     commit is guarded by the run's version and the cell's generation in the database, so a row
 *     another process wrote since only sends the commit to lock and read the run.
 * Plain maps of this process: no fiber, no effect, no SQL.
 */
import { Deferred, FiberId } from "effect"

import * as RunState from "../Domain/RunState.js"
import type { FirstRead, RunRow } from "./RunStore.js"
import type { Locked } from "./Statements.js"

/** How many ended runs' rows are kept for their waiters (`ended`): a waiter takes its row within milliseconds. */
const ENDED_KEPT = 1024
/** How long after its admission a run's row is taken from it by its actor rather than read (`starting`). */
const ADMITTED_FRESH_MS = 5_000

/** How many unfinished runs' rows are kept for their actors' next commits (`commitAll`). */
const KEPT = 10_000

/** Sets `key` last in an insertion-ordered map of at most `max` entries, the oldest dropped. */
const remember = <V>(map: Map<string, V>, key: string, value: V, max: number) => {
  map.delete(key)
  map.set(key, value)
  if (map.size > max) map.delete(map.keys().next().value!)
}

/**
 * What admissions here leave for their runs' actors, by run: taken once, and only within
 * ADMITTED_FRESH_MS of being kept (an actor starts within milliseconds; a run whose cell moved
 * meanwhile is read); at most ENDED_KEPT, the oldest dropped.
 */
const freshOnce = <V>() => {
  const kept = new Map<string, { readonly value: V; readonly at: number }>()
  return {
    keep: (id: string, value: V) => remember(kept, id, { value, at: Date.now() }, ENDED_KEPT),
    take: (id: string): V | undefined => {
      const entry = kept.get(id)
      if (entry === undefined) return undefined
      kept.delete(id)
      return Date.now() - entry.at <= ADMITTED_FRESH_MS ? entry.value : undefined
    }
  }
}

export const makeRunCaches = () => {
  /** Rows of runs this process's commits ended, until taken (at most ENDED_KEPT, the oldest dropped). */
  const endedHere = new Map<string, RunRow>()
  /**
   * Runs whose ending commit this process is making: the commit's notification can reach a waiter
   * before the committing fiber resumes, which then waits for its outcome rather than reading.
   */
  const ending = new Map<string, Deferred.Deferred<RunRow | undefined>>()

  /** Runs this process admitted, until their actor takes them (`freshOnce`). */
  const admittedHere = freshOnce<RunRow>()
  /** What admissions here read for their runs' first dispatch, until their actor takes it. */
  const firstReads = freshOnce<FirstRead>()

  /**
   * Runs as this process last wrote them (its admission or commit), for the next commit of their
   * actor to plan from without reading (issue 20: the actor is the run's only writer but for a
   * cancel, and its commit checks the run's version in the database). Unfinished runs only, at
   * most KEPT, the oldest dropped.
   */
  const kept = new Map<string, Locked>()

  return {
    /** The ended run's row, taken (undefined: not kept). */
    takeEnded: (id: string) => {
      const row = endedHere.get(id)
      if (row !== undefined) endedHere.delete(id)
      return row
    },
    keepEnded: (row: RunRow) => remember(endedHere, row.id, row, ENDED_KEPT),
    /** The outcome of the ending commit this process is making for the run, if it is making one. */
    endingOf: (id: string) => ending.get(id),
    /**
     * Marks the run as being ended by this process's commit; `settle` (once the commit is over,
     * whatever its outcome) resolves its waiters with the ended row kept, if the commit made it.
     */
    beginEnding: (id: string) => {
      const outcome = Deferred.unsafeMake<RunRow | undefined>(FiberId.none)
      ending.set(id, outcome)
      return {
        settle: () => {
          if (ending.get(id) === outcome) ending.delete(id)
          return Deferred.succeed(outcome, endedHere.get(id))
        }
      }
    },
    keepAdmitted: (row: RunRow) => admittedHere.keep(row.id, row),
    /** The admitted run's row, taken; undefined when not kept or no longer fresh (the caller reads it). */
    takeAdmitted: admittedHere.take,
    keepFirstRead: firstReads.keep,
    /** The admission's read for the run's first dispatch, taken; undefined when not kept or no longer fresh. */
    takeFirstRead: firstReads.take,
    /** The run as this process last wrote it, if it is unfinished and kept. */
    known: (id: string) => kept.get(id),
    /** Keeps the run as this process just wrote it (an ended run is let go). */
    keep: (row: Locked) => RunState.isTerminal(row.status) ? kept.delete(row.id) : remember(kept, row.id, row, KEPT),
    forget: (id: string) => kept.delete(id)
  }
}

export type RunCaches = ReturnType<typeof makeRunCaches>
