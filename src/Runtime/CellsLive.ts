/**
 * The cells, as `@effect/cluster` entities (src/Cells/Entity.ts): this node registers the cell
 * behaviour (a cell starts on the runner that owns its shard, on its first message or when it
 * moves there) and sends every command through the cluster's client, so a request on any node
 * reaches the one cell of its tenant/environment: one rate limiter, one set of stream counts, one
 * owner of its runs. A cell's fibers live in the entity's scope; the cluster stops it when it has
 * been idle for CELL_IDLE_TIMEOUT_SECONDS and is not busy (Cell's keep-alive).
 *
 * A cell running on this node is also called directly (no serialization, no mailbox): it is here
 * only while this runner owns its shard. Every so often a command goes through the cluster anyway,
 * so the cluster sees the cell in use.
 */
import { Entity, EntityId, Sharding } from "@effect/cluster"
import type { AlreadyProcessingMessage, MailboxFull, PersistenceError } from "@effect/cluster/ClusterError"
import { Cause, Clock, Context, Duration, Effect, Either, FiberRef, Layer, Option, Record } from "effect"

import { Agents } from "../Agents.js"
import { ApprovalsRepo } from "../Approvals.js"
import { Cells, type CellsShape, CellUnavailable } from "../Cells/Cells.js"
import { CellEntity } from "../Cells/Entity.js"
import { ClusterNode, PlacementsRepo } from "../Cells/Placements.js"
import { type CellId, cellKey, type CellTag, type Command, type Reply } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { Trigger } from "../Domain/RunState.js"
import { Files } from "../Files.js"
import type { EnvironmentName } from "../Kernel/Ids.js"
import { provideOwn } from "../Kernel/OwnFiber.js"
import { withRealDeadline } from "../Kernel/RealTime.js"
import { currentRequestStartedAt } from "../Kernel/RequestId.js"
import { Shares } from "../Kernel/Shares.js"
import { Memory } from "../Memory.js"
import { StepEngine } from "../Models.js"
import { withoutParentSpan } from "../Observability/Tracing.js"
import { Platform, PlatformRepo } from "../Platform.js"
import { QuotasRepo } from "../Quotas.js"
import { RunStore } from "../Runs.js"
import { Invoker, OperationsRepo, Tools } from "../Tools.js"
import * as Cell from "./Cell.js"
import { type DispatchReads, DispatchReadsSql } from "./DispatchReads.js"
import * as RunActor from "./RunActor.js"
import * as ToolCalls from "./ToolCalls.js"

/** `tenant/environment` back to the cell's id (entity ids are cell keys). */
const cellIdOf = (entityId: string): CellId => {
  const slash = entityId.lastIndexOf("/")
  return { tenantId: entityId.slice(0, slash), environment: entityId.slice(slash + 1) as EnvironmentName }
}

const realClock = Clock.make()

/** Defects of the transport between runners: the cell's runner is gone (the cell is moving). */
const TRANSPORT_ERRORS = new Set(["SocketError", "RpcClientError", "SocketGenericError", "SocketCloseError"])

/**
 * The cluster's client of one cell, seen per command name (the client's type, written as a mapped
 * type over the names so that `client[tag](command)` is typed by the command's name).
 */
type CellClient = {
  readonly [K in CellTag]: (command: Command<K>) => Effect.Effect<Reply<K>, MailboxFull | AlreadyProcessingMessage | PersistenceError>
}

interface Local {
  readonly cell: Cell.Cell
  /** when a command last reached it through the cluster (real time) */
  routedAt: number
}

const make = Effect.gen(function*() {
  const config = yield* AppConfig
  const platform = yield* PlatformRepo
  const quotas = yield* QuotasRepo
  const placements = yield* PlacementsRepo
  const node = yield* ClusterNode
  const sharding = yield* Sharding.Sharding
  // The clock of whoever built the service (TestClock in suites): cells, their actors and their
  // budgets run on it; the runner's own loops run on the real one (src/Runtime/Cluster.ts).
  const clock = yield* Effect.clock
  const repo = yield* RunStore
  const actorContext = yield* Effect.context<
    | RunStore
    | DispatchReads
    | StepEngine
    | Agents
    | Platform
    | Tools
    | AppConfig
    | OperationsRepo
    | ApprovalsRepo
    | Invoker
    | Memory
    | Files
    | Shares
  >()
  const scheduler = Context.get(actorContext, Shares).scheduler
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
    // The actor runs in a fiber of its own (its cell forks it): its services and its cell's lane
    // of the node's fair scheduler (issue 36; the cell names it: CurrentShare) are set there, not
    // scoped (a provide copies the fiber's context and costs a dozen effects, per run).
    runActor: (runId, actorOptions) =>
      Effect.zipRight(FiberRef.set(FiberRef.currentScheduler, scheduler), provideOwn(actorContext)(RunActor.run(runId, actorOptions))),
    // A write whose outcome is not known is never shown as cancelled (contract 3.1 rule 2).
    completeCancel: (runId, generation) =>
      endAs(runId, generation, Trigger.CompleteCancel(), "cancelled while the write's outcome was unknown"),
    openRuns: (id) => Effect.orDie(repo.openRunsOf(id.tenantId, id.environment)),
    endForDeletion: (runId, generation) =>
      endAs(runId, generation, Trigger.EnvironmentDeleted(), "its environment was deleted while the write's outcome was unknown"),
    keepAlive: () => Effect.void,
    releaseEveryMillis: Math.max(1000, (config.cellIdleTimeoutSeconds * 1000) / 4)
  }
  const idleMs = config.cellIdleTimeoutSeconds * 1000
  const sendTimeoutMillis = config.cluster.sendTimeoutSeconds * 1000
  /**
   * How long a routed call may wait: what is left of the send timeout since its request started
   * (a request that waited for a database connection behind a hung node's locks, or made a call
   * before, has less), at least `MIN_SEND_MILLIS` (a stream's last call, long after its request
   * began, still gets its chance); the send timeout outside a request.
   */
  const sendBudget = Effect.map(FiberRef.get(currentRequestStartedAt), (startedAt) => {
    const waited = startedAt === 0 ? 0 : Date.now() - startedAt
    return {
      budget: Duration.millis(startedAt === 0 ? sendTimeoutMillis : Math.max(MIN_SEND_MILLIS, sendTimeoutMillis - waited)),
      waited
    }
  })
  const local = new Map<string, Local>()

  // The behaviour: runs once per cell start on this runner, in the entity's scope.
  yield* sharding.registerEntity(
    CellEntity,
    Effect.gen(function*() {
      const address = yield* Entity.CurrentAddress
      const entityContext = yield* Effect.context<Sharding.Sharding | Entity.CurrentAddress>()
      const id = cellIdOf(address.entityId)
      const key = address.entityId
      const cell = yield* Cell.make(id, {
        ...options,
        keepAlive: (enabled) => Effect.provide(Entity.keepAlive(enabled), entityContext)
      }).pipe(Effect.withClock(clock), withoutParentSpan)
      const entry: Local = { cell, routedAt: Date.now() }
      local.set(key, entry)
      yield* Effect.addFinalizer(() =>
        Effect.zipRight(
          Effect.sync(() => local.get(key) === entry && local.delete(key)),
          Effect.ignore(placements.removed(id, node.address))
        )
      )
      yield* Effect.ignoreLogged(placements.placed(id, node.address, cell.generation))
      // The entity's handlers: for each of the cell's, a command that came through the cluster is
      // noted (routedAt), then handled by the cell on the clock of whoever built the service.
      const routedHere = <K extends CellTag>(request: { readonly payload: Command<K> }) => {
        entry.routedAt = Date.now()
        return Effect.withClock(cell.handle(request.payload), clock)
      }
      return CellEntity.of(Record.map(cell.handlers, () => routedHere))
    }),
    { concurrency: "unbounded", disableFatalDefects: true }
  ).pipe(Effect.withClock(realClock)) // the entity manager's own loops run on the real clock

  const client = yield* sharding.makeClient(CellEntity).pipe(Effect.withClock(realClock))

  /** Through the cluster, to whichever runner owns the cell; 503 if it cannot be reached in time. */
  const routed = <K extends CellTag>(key: string, command: Command<K>): Effect.Effect<Reply<K>> => {
    const cell: CellClient = client(key)
    const tag: K = command._tag
    // A call that times out is answered at once and interrupted in the background: the interrupt
    // travels to the owner, and a hung owner would hold the answer until it resumed (issue 41).
    return Effect.flatMap(sendBudget, ({ budget, waited }) =>
      withRealDeadline(
        cell[tag](command),
        Duration.toMillis(budget),
        (late) => `timed out after ${Duration.toMillis(budget)} ms (${waited} ms into its request; the timer fired ${late} ms late)`
      )).pipe(
        Effect.catchAll((error) => Effect.die(new CellUnavailable({ cell: key, reason: typeof error === "string" ? error : error._tag }))),
        // The cell was stopped under the request (this node is shutting down, or lost the shard):
        // the request did not reach it, and may be retried on another node.
        // The runner that owned it died under the request (its socket): it moves.
        Effect.catchAllCause((cause) => {
          if (Cause.isInterruptedOnly(cause)) return Effect.die(new CellUnavailable({ cell: key, reason: "the cell stopped" }))
          const defect: any = Option.getOrUndefined(Cause.dieOption(cause))
          return TRANSPORT_ERRORS.has(defect?._tag)
            ? Effect.die(new CellUnavailable({ cell: key, reason: `${defect._tag}: ${defect.message ?? ""}` }))
            : Effect.failCause(cause)
        }),
        Effect.withClock(realClock)
      )
  }

  /**
   * Sends a command to the cell of `id` (starting it if needed) and awaits the reply. A cell whose
   * shard this runner holds but whose lease it cannot vouch for (it has just resumed from a stall,
   * or cannot renew) is not served until a renewal tells: another runner may own it now (issue 41).
   */
  const send = <K extends CellTag>(id: CellId, command: Command<K>): Effect.Effect<Reply<K>> => {
    const key = cellKey(id)
    const entityId = EntityId.make(key)
    const shard = sharding.getShardId(entityId, CellEntity.getShardGroup(entityId))
    if (sharding.hasShardId(shard) && !node.holdsLease(shard.toString())) {
      return Effect.die(new CellUnavailable({ cell: key, reason: "this node is confirming its lease on the cell" }))
    }
    const here = local.get(key)
    return here !== undefined && Date.now() - here.routedAt < idleMs / 4 ? here.cell.handle(command) : routed(key, command)
  }

  /** Like `send`, to a cell that is running (on any node) only: none when it is not (nothing is started). */
  const sendIfRunning = <K extends CellTag>(id: CellId, command: Command<K>): Effect.Effect<Option.Option<Reply<K>>> =>
    local.has(cellKey(id))
      ? Effect.asSome(send(id, command))
      : Effect.flatMap(
        Effect.orDie(placements.isPlaced(id, node.expirationSeconds)),
        (placed) => placed ? Effect.asSome(send(id, command)) : Effect.succeedNone
      )

  const activeCount = Effect.sync(() => local.size)
  return { send, sendIfRunning, activeCount } satisfies CellsShape
})

/** The least a routed call is given, whatever is left of its request's send timeout. */
const MIN_SEND_MILLIS = 1000

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
    Files.Default,
    PlacementsRepo.Default,
    DispatchReadsSql
  ])
)
