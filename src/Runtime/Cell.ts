/**
 * A cell: one tenant/environment pair. A scoped fiber tree owning its rate limiter, its quota
 * limits, its generation, its run actors (a FiberMap keyed by run id, each supervised: a defect restarts that
 * actor from the database with backoff, never the cell), its execution slots, its SSE stream
 * counts and its runs' timers: one loop per cell holds every deadline of its run actors (contract
 * part 8) and every alarm of its parked runs, so no run races a timer of its own. Commands are
 * processed by its `handlers` (one per RPC of the protocol); everything the cell owns is released (actors
 * interrupted, to be recovered from the database) when its scope closes.
 */
import { Cause, Clock, Context, Effect, Fiber, FiberMap, Option, Queue, Ref, Schedule } from "effect"

import {
  type CellHandlers,
  type CellId,
  cellKey,
  type CellTag,
  type Command,
  dispatch,
  type OpenStreamReply,
  type Reply
} from "../Cells/Protocol.js"
import type { RunConfig } from "../Config/AppConfig.js"
import type { QuotaLimits } from "../Domain/Quotas.js"
import type { Budget } from "../Domain/RunState.js"
import { sleepUntil } from "../Kernel/Alarms.js"
import { CurrentShare } from "../Kernel/FairShare.js"
import { annotateOwn, provideOwn } from "../Kernel/OwnFiber.js"
import * as RateLimiter from "../Kernel/RateLimiter.js"
import { realPause } from "../Kernel/RealTime.js"
import { retried } from "../Kernel/Retried.js"
import { activeInScope, cellsActive, runActorsActive, trackActive } from "../Observability/Metrics.js"
import type { ActorMemory, ActorOptions } from "./RunActor.js"

export interface Cell {
  readonly id: CellId
  readonly generation: number
  /** The cell's behaviour: a handler per command of the protocol. */
  readonly handlers: CellHandlers
  /** Calls the handler of `command`. */
  readonly handle: <K extends CellTag>(command: Command<K>) => Effect.Effect<Reply<K>>
}

export interface CellOptions {
  /** A new durable generation for the cell (each restore in some process gets the next one). */
  readonly nextGeneration: (id: CellId) => Effect.Effect<number>
  readonly rateLimit: RateLimiter.RateLimitPolicy
  /** The cell's quota limits (D16): the operator's, else the defaults of its environment kind. */
  readonly quotaLimits: (id: CellId) => Effect.Effect<QuotaLimits>
  readonly runs: RunConfig
  /** The run actor (its services provided): drives one run from the database, in a fiber of its own (this cell forks it). */
  readonly runActor: (runId: string, options: ActorOptions) => Effect.Effect<void>
  /** Completes a cancellation once the actor is stopped (`cancel_requested` -> `cancelled`), fenced by the cell's generation. */
  readonly completeCancel: (runId: string, generation: number) => Effect.Effect<void>
  /**
   * The unfinished runs of the cell (their actors start when the cell does), and how one ends when
   * its environment is deleted (actor stopped).
   */
  readonly openRuns: (id: CellId) => Effect.Effect<ReadonlyArray<string>>
  readonly endForDeletion: (runId: string, generation: number) => Effect.Effect<void>
  /**
   * Keeps the cell running while it is busy (run actors, parked runs, open streams), whatever its
   * idle time: `true` is durable (the cluster's persisted keep-alive message), so when its node
   * dies the cell starts again on its new owner and resumes its runs; `false` releases it.
   */
  readonly keepAlive: (enabled: boolean) => Effect.Effect<void>
  /** How often (real time) a cell that is no longer busy releases its keep-alive. */
  readonly releaseEveryMillis: number
}

/** A defect or failure restarts the actor after a backoff (200 ms doubling, at most 30 s). */
const restartBackoff = Schedule.exponential("200 millis").pipe(Schedule.union(Schedule.spaced("30 seconds")))

/** Restores a cell: bumps its durable generation, builds its limiter, its actor map and counters. */
export const make = (id: CellId, options: CellOptions) =>
  Effect.gen(function*() {
    const generation = yield* options.nextGeneration(id)
    yield* activeInScope(cellsActive)
    const limiter = yield* RateLimiter.make(options.rateLimit)
    const quotaLimits = yield* Ref.make(yield* options.quotaLimits(id))
    const policy = RateLimiter.policyHeader(options.rateLimit)
    const actors = yield* FiberMap.make<string>()
    const slots = yield* Effect.makeSemaphore(options.runs.maxActiveRunsPerCell)
    const streams = { total: 0, byActor: new Map<string, number>() }
    const cellLabel = cellKey(id)

    // The cell's timers, one loop for all (below), on Effect's Clock.
    // Alarms: runs waiting for a human hold no fiber; the loop revives each at its deadline
    // (approval expiry), or earlier when a decision starts it.
    const alarms = new Map<string, number>()
    // Deadlines: a run's actor holds no timer either. It registers the deadline of the phase it is
    // in (RunActor's `within`) and clears it when it leaves the phase; when one passes, the loop
    // interrupts that actor and starts it again told which budget ran out (`expireActor`).
    const deadlines = new Map<string, { readonly at: number; readonly budget: Budget; readonly memory: ActorMemory }>()
    // When the loop wakes next (Infinity while it looks, or when it waits for nothing): a timer due
    // later needs no wake-up, so a run's deadlines cost no fiber of the loop's (it re-arms its sleep
    // only for an earlier one).
    let armedAt = Number.POSITIVE_INFINITY
    const timersChanged = yield* Queue.sliding<void>(1)
    const rearmBefore = (at: number) => at < armedAt ? Queue.offer(timersChanged, undefined) : Effect.void
    const wakeAt = (runId: string, at: Date) =>
      Effect.zipRight(Effect.sync(() => alarms.set(runId, at.getTime())), rearmBefore(at.getTime())).pipe(
        Effect.zipRight(holdAlive)
      )

    // Busy (an actor, a parked run, an open stream): kept alive, durably, from the first moment.
    // Released by a real-time look once nothing is left (a cell busy again soon keeps it).
    let keptAlive = false
    const holdAlive: Effect.Effect<void> = Effect.suspend(() => {
      if (keptAlive) return Effect.void
      keptAlive = true
      return options.keepAlive(true)
    })
    const busy = Effect.map(FiberMap.size(actors), (n) => n > 0 || streams.total > 0 || alarms.size > 0)
    yield* Effect.gen(function*() {
      while (true) {
        yield* realPause(options.releaseEveryMillis)
        if (yield* busy) continue
        keptAlive = false
        yield* options.keepAlive(false)
        // Busy again meanwhile: hold it again.
        if (yield* busy) yield* holdAlive
      }
    }).pipe(Effect.interruptible, Effect.forkScoped)

    /** The actor of `runId`; `expired`: the budget that ran out while its previous start worked. */
    const supervised = (runId: string, memory: ActorMemory = {}, expired?: Budget): Effect.Effect<void> =>
      options.runActor(runId, {
        slots,
        cellGeneration: generation,
        wakeAt,
        deadline: (at, budget) =>
          Effect.suspend(() => {
            deadlines.set(runId, { at: at.getTime(), budget, memory })
            return rearmBefore(at.getTime())
          }),
        clearDeadline: Effect.sync(() => void deadlines.delete(runId)),
        expired,
        memory,
        quotaLimits: Ref.get(quotaLimits)
      }).pipe(
        Effect.sandbox,
        Effect.tapError((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.void
            : Effect.logError("run actor failed; restarting it from the database", cause)
        ),
        (attempt) => retried(attempt, { schedule: restartBackoff, while: (cause) => !Cause.isInterruptedOnly(cause) }),
        Effect.unsandbox,
        (actor) => trackActive(runActorsActive, actor),
        // the actor's own fiber (forked for it): its log lines name its run, and what it does
        // spends this cell's shares of the node (issue 36); set, not scoped
        (actor) =>
          Effect.zipRight(
            annotateOwn({ cell: cellLabel, tenant_id: id.tenantId, run_id: runId }),
            provideOwn(Context.make(CurrentShare, cellLabel))(actor)
          )
      )

    /**
     * Runs told to start while their actor was still at work: e.g. a decision that committed while
     * the actor was parking the run (between its commit of `requires_action` and its end), whose
     * `StartRun` found the actor still there. Such an actor starts once more when it ends, reading
     * the run as it is then (else the run would wait for its alarm, the approval's expiry).
     */
    const startAgain = new Set<string>()
    const actorOf = (runId: string): Effect.Effect<void> =>
      Effect.zipRight(
        supervised(runId),
        // told to start meanwhile: what the command would have done (the alarm it set is superseded)
        Effect.suspend(() => (startAgain.delete(runId)
          ? Effect.zipRight(
            Effect.sync(() => alarms.delete(runId)),
            actorOf(runId)
          )
          : Effect.void)
        )
      )
    const startActor = (runId: string) =>
      Effect.zipRight(holdAlive, Effect.asVoid(FiberMap.run(actors, runId, actorOf(runId), { onlyIfMissing: true })))

    /**
     * A budget ran out (contract part 8): the actor's work in flight is interrupted, and once it has
     * stopped (its slot released) the actor starts again with the budget, ending the run with it as
     * before: a write whose outcome is unknown still wins (`outcome_unknown`). A defect there restarts
     * it like any other.
     */
    const expireActor = (runId: string, budget: Budget, memory: ActorMemory) =>
      Option.match(FiberMap.unsafeGet(actors, runId), {
        onNone: () => Effect.void,
        onSome: (working) =>
          Effect.asVoid(FiberMap.run(actors, runId, Effect.zipRight(Fiber.await(working), supervised(runId, memory, budget))))
      })

    yield* Effect.gen(function*() {
      while (true) {
        armedAt = Number.POSITIVE_INFINITY
        const now = yield* Clock.currentTimeMillis
        let next = Number.POSITIVE_INFINITY
        for (const [runId, at] of alarms) {
          if (at <= now) {
            alarms.delete(runId)
            yield* startActor(runId)
          } else next = Math.min(next, at)
        }
        for (const [runId, deadline] of deadlines) {
          if (deadline.at <= now) {
            deadlines.delete(runId)
            yield* expireActor(runId, deadline.budget, deadline.memory)
          } else next = Math.min(next, deadline.at)
        }
        armedAt = next
        yield* sleepUntil(next, now, timersChanged)
      }
    }).pipe(Effect.interruptible, Effect.forkScoped)

    // The cell's unfinished runs go on here, whichever process ran them before (a restart, or a
    // cell that moved): each actor continues from its run's last commit, or parks awaiting a decision.
    yield* Effect.forEach(yield* options.openRuns(id), startActor, { discard: true })

    const openStream = (actorId: string): OpenStreamReply => {
      if (streams.total >= options.runs.streamsPerCell) return { opened: false, limit: "cell" }
      const mine = streams.byActor.get(actorId) ?? 0
      if (mine >= options.runs.streamsPerActor) return { opened: false, limit: "actor" }
      streams.total++
      streams.byActor.set(actorId, mine + 1)
      return { opened: true }
    }
    const closeStream = (actorId: string) => {
      const mine = streams.byActor.get(actorId) ?? 0
      if (mine <= 1) streams.byActor.delete(actorId)
      else streams.byActor.set(actorId, mine - 1)
      if (mine > 0) streams.total--
    }

    const handlers: CellHandlers = {
      AdmitRequest: () => Effect.map(limiter.take, (d) => ({ ...d, policy, state: RateLimiter.stateHeader(d) })),
      GetGeneration: () => Effect.succeed(generation),
      StartRun: ({ runId }) =>
        Effect.suspend(() => {
          alarms.delete(runId)
          if (!FiberMap.unsafeHas(actors, runId)) return startActor(runId)
          startAgain.add(runId)
          return Effect.void
        }),
      ResumeRuns: ({ runIds }) => Effect.forEach(runIds, (runId) => alarms.has(runId) ? Effect.void : startActor(runId), { discard: true }),
      CancelRun: ({ runId }) =>
        Effect.zipRight(
          Effect.zipRight(Effect.sync(() => startAgain.delete(runId)), FiberMap.remove(actors, runId)),
          options.completeCancel(runId, generation)
        ),
      EndRuns: () =>
        Effect.gen(function*() {
          alarms.clear()
          startAgain.clear()
          yield* FiberMap.clear(actors)
          deadlines.clear()
          for (const runId of yield* options.openRuns(id)) yield* options.endForDeletion(runId, generation)
        }),
      OpenStream: ({ actorId }) => Effect.tap(Effect.sync(() => openStream(actorId)), (reply) => reply.opened ? holdAlive : Effect.void),
      CloseStream: ({ actorId }) => Effect.sync(() => closeStream(actorId)),
      GetQuotaLimits: () => Ref.get(quotaLimits),
      ReloadQuotaLimits: () => Effect.flatMap(options.quotaLimits(id), (limits) => Ref.set(quotaLimits, limits)),
      GetCellStats: () =>
        Effect.map(FiberMap.size(actors), (running) => ({
          generation,
          running_actors: running,
          parked_runs: alarms.size,
          streams: streams.total
        }))
    }
    const handle = <K extends CellTag>(command: Command<K>) => dispatch(handlers, command)
    yield* Effect.logDebug("cell restored").pipe(Effect.annotateLogs({ cell: cellLabel, generation }))
    return { id, generation, handlers, handle } satisfies Cell
  })
