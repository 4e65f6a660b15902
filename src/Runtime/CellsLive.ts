/**
 * The cell supervisor: starts a cell on first use, keeps one per tenant/environment in this
 * process, and stops cells that have been idle for `CELL_IDLE_TIMEOUT_SECONDS` (the next command
 * restores them, with a new generation). Each cell lives in its own child scope, so closing one
 * never touches another.
 */
import { Clock, Deferred, Effect, Either, ExecutionStrategy, Exit, Layer, type Option, Ref, Schedule, Scope, SynchronizedRef } from "effect"

import { Agents } from "../Agents.js"
import { ApprovalsRepo } from "../Approvals/Repo.js"
import { Cells, type CellsShape } from "../Cells/Cells.js"
import { type CellCommand, type CellId, cellKey, type ReplyOf } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { Trigger } from "../Domain/RunState.js"
import { Files } from "../Files.js"
import { Memory } from "../Memory.js"
import { StepEngine } from "../Models/StepEngine.js"
import { withoutParentSpan } from "../Observability/Tracing.js"
import { Platform } from "../Platform.js"
import { PlatformRepo } from "../Platform/Repo.js"
import { QuotasRepo } from "../Quotas/Repo.js"
import { RunStore } from "../Runs/RunStore.js"
import { Tools } from "../Tools.js"
import { Invoker } from "../Tools/Invoker.js"
import { OperationsRepo } from "../Tools/OperationsRepo.js"
import * as Cell from "./Cell.js"
import * as RunActor from "./RunActor.js"
import * as ToolCalls from "./ToolCalls.js"

interface Entry {
  readonly cell: Deferred.Deferred<Cell.Cell>
  readonly scope: Scope.CloseableScope
}

const make = Effect.gen(function*() {
  const config = yield* AppConfig
  const platform = yield* PlatformRepo
  const quotas = yield* QuotasRepo
  const parent = yield* Effect.scope
  const entries = yield* SynchronizedRef.make(new Map<string, Entry>())
  const repo = yield* RunStore
  const actorContext = yield* Effect.context<
    RunStore | StepEngine | Agents | Platform | Tools | AppConfig | OperationsRepo | ApprovalsRepo | Invoker | Memory | Files
  >()
  /** Ends a run whose actor is stopped; a write whose outcome is not known wins (contract 3.1 rule 2). */
  const endAs = (runId: string, generation: number, ending: Trigger, unknownReason: string) =>
    ToolCalls.endUnfinished((...c) => Effect.map(repo.commitAll(runId, c, generation), Either.isRight), runId, ending, unknownReason).pipe(
      Effect.provide(actorContext),
      Effect.orDie
    )

  const options: Cell.CellOptions = {
    nextGeneration: (id) => Effect.orDie(platform.nextCellGeneration(id)),
    rateLimit: config.rateLimit,
    quotaLimits: (id) => Effect.orDie(quotas.limits(id, config.quotas[id.environment])),
    runs: config.runs,
    runActor: (runId, actorOptions) => Effect.provide(RunActor.run(runId, actorOptions), actorContext),
    // A write whose outcome is not known is never shown as cancelled (contract 3.1 rule 2).
    completeCancel: (runId, generation) =>
      endAs(runId, generation, Trigger.CompleteCancel(), "cancelled while the write's outcome was unknown"),
    openRuns: (id) => Effect.orDie(repo.openRunsOf(id.tenantId, id.environment)),
    endForDeletion: (runId, generation) =>
      endAs(runId, generation, Trigger.EnvironmentDeleted(), "its environment was deleted while the write's outcome was unknown")
  }

  const start = (id: CellId) =>
    SynchronizedRef.modifyEffect(entries, (map) => {
      const existing = map.get(cellKey(id))
      if (existing) return Effect.succeed([existing, map] as const)
      return Effect.gen(function*() {
        const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
        const cell = yield* Deferred.make<Cell.Cell>()
        const entry: Entry = { cell, scope }
        // Build outside the lock; waiters join the Deferred. The cell outlives the request that
        // happened to start it: its fibers (the alarm loop) are not part of that request's trace.
        yield* Cell.make(id, options).pipe(
          Scope.extend(scope),
          Effect.exit,
          Effect.flatMap((exit) =>
            Effect.zipRight(
              Deferred.done(cell, exit),
              // A cell that failed to start is forgotten, so the next command tries again.
              Exit.isFailure(exit) ? forget(id, entry) : Effect.void
            )
          ),
          withoutParentSpan,
          Effect.forkIn(scope)
        )
        return [entry, new Map(map).set(cellKey(id), entry)] as const
      })
    })

  const forget = (id: CellId, entry: Entry) =>
    SynchronizedRef.update(entries, (map) => {
      if (map.get(cellKey(id)) !== entry) return map
      const next = new Map(map)
      next.delete(cellKey(id))
      return next
    })

  /** Sends a command to the cell of `id` (starting it if needed) and awaits the reply. */
  const send = <C extends CellCommand>(id: CellId, command: C): Effect.Effect<ReplyOf<C>> =>
    Effect.flatMap(start(id), (entry) => Effect.flatMap(Deferred.await(entry.cell), (cell) => cell.handle(command)))

  /** Like `send`, to a cell that is running (or starting) only: none when it is not (nothing is started). */
  const sendIfRunning = <C extends CellCommand>(id: CellId, command: C): Effect.Effect<Option.Option<ReplyOf<C>>> =>
    Effect.flatMap(SynchronizedRef.get(entries), (map) => {
      const entry = map.get(cellKey(id))
      return entry === undefined
        ? Effect.succeedNone
        : Effect.asSome(Effect.flatMap(Deferred.await(entry.cell), (cell) => cell.handle(command)))
    })

  const stopIdle = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const idleMs = config.cellIdleTimeoutSeconds * 1000
    yield* SynchronizedRef.updateEffect(entries, (map) =>
      Effect.gen(function*() {
        const next = new Map(map)
        for (const [key, entry] of map) {
          const polled = yield* Deferred.poll(entry.cell)
          if (polled._tag === "None") continue // still starting
          // A cell that failed to start holds a defect: `Effect.option` would let it escape and kill
          // this sweep loop for good. Such an entry is dropped like an idle one.
          const cell = yield* Effect.exit(polled.value)
          if (Exit.isSuccess(cell) && now - (yield* Ref.get(cell.value.lastUsed)) < idleMs) continue
          if (Exit.isSuccess(cell) && (yield* cell.value.busy)) continue
          next.delete(key)
          yield* Scope.close(entry.scope, Exit.void)
        }
        return next
      }))
  })

  yield* stopIdle.pipe(
    Effect.repeat(Schedule.spaced(`${Math.max(1, Math.floor(config.cellIdleTimeoutSeconds / 4))} seconds`)),
    Effect.forkScoped
  )

  const activeCount = Effect.map(SynchronizedRef.get(entries), (m) => m.size)
  /** Stops a cell now (e.g. its environment was deleted). */
  const stop = (id: CellId) =>
    SynchronizedRef.updateEffect(entries, (map) => {
      const entry = map.get(cellKey(id))
      if (!entry) return Effect.succeed(map)
      const next = new Map(map)
      next.delete(cellKey(id))
      return Effect.as(Scope.close(entry.scope, Exit.void), next)
    })

  return { send, sendIfRunning, stop, activeCount } satisfies CellsShape
})

/** The cells of this process; the services their run actors drive come from the caller (unit tests). */
export const CellsWithoutDependencies = Layer.scoped(Cells, make)

/** The cells of this process, with the services their run actors drive. */
export const CellsLive = CellsWithoutDependencies.pipe(
  Layer.provide([
    StepEngine.Default,
    Agents.Default,
    Platform.Default,
    PlatformRepo.Default,
    QuotasRepo.Default,
    Tools.Default,
    OperationsRepo.Default,
    ApprovalsRepo.Default,
    Invoker.Default,
    Memory.Default,
    Files.Default
  ])
)
