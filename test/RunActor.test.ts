/**
 * The run actor in milliseconds: the real cells and run actors (src/Runtime) over the in-memory run
 * store, the real step engine with the `scripted` model, and only the services a run touches
 * stubbed (test/support/Layer.ts: anything else dies loudly). Time is TestClock's, so the budgets
 * of contract part 8 are proved without waiting: start deadline, execution deadline, total
 * authorization; and revocation before a dispatch, cancellation, and a defect restarting one actor
 * without touching another cell. The same behaviours are proved end to end over HTTP on Postgres
 * in Runs.test.ts, Cells.test.ts and Recovery.test.ts.
 */
import { TestRunner } from "@effect/cluster"
import { describe, expect, it } from "@effect/vitest"
import { type Context, Effect, type Exit, type Fiber, FiberRef, HashMap, Layer, Option, Ref, Supervisor, TestClock } from "effect"
import { Agents } from "../src/Agents.js"
import { ApprovalsRepo } from "../src/Approvals/Repo.js"
import { Cells } from "../src/Cells/Cells.js"
import { ClusterNode, PlacementsRepo } from "../src/Cells/Placements.js"
import { CancelRun, type CellId, StartRun } from "../src/Cells/Protocol.js"
import { AppConfig, defaultRunConfig, type RunConfig } from "../src/Config/AppConfig.js"
import { SharesLive } from "../src/Config/Shares.js"
import type { ScriptedStep } from "../src/Domain/Agents.js"
import { Trigger } from "../src/Domain/RunState.js"
import { Files } from "../src/Files.js"
import { makeId } from "../src/Kernel/Ids.js"
import { Memory } from "../src/Memory.js"
import { StepEngine } from "../src/Models/StepEngine.js"
import { Platform } from "../src/Platform.js"
import { PlatformRepo } from "../src/Platform/Repo.js"
import { QuotasRepo } from "../src/Quotas/Repo.js"
import { RunStore } from "../src/Runs/RunStore.js"
import { RunStoreMemory } from "../src/Runs/RunStoreMemory.js"
import { CellsWithoutDependencies } from "../src/Runtime/CellsLive.js"
import { onRealClock } from "../src/Runtime/Cluster.js"
import { DispatchReadsOfServices } from "../src/Runtime/DispatchReads.js"
import { Tools } from "../src/Tools.js"
import { CallOutcome, Invoker } from "../src/Tools/Invoker.js"
import { OperationsRepo } from "../src/Tools/OperationsRepo.js"
import type { ToolRow } from "../src/Tools/Repo.js"
import { makeTestLayer } from "./support/Layer.js"

const cell: CellId = { tenantId: "ten_unit", environment: "sandbox" }

const lookupTool: ToolRow = {
  id: "tool_lookup",
  tenant_id: cell.tenantId,
  environment: cell.environment,
  connection_id: "conn_unit",
  name: "lookup",
  description: null,
  effect: "read",
  base_url: "https://tools.example",
  path: "/lookup",
  reconciliation_path: null,
  input_schema: { type: "object" },
  output_schema: { type: "object" },
  created_at: new Date(0)
}

interface World {
  /** whether the run's key (and user) may still act, or its environment is being deleted */
  readonly authorized: Ref.Ref<"active" | "revoked" | "deleted">
  /** revision id -> scripted steps */
  readonly revisions: Map<string, ReadonlyArray<ScriptedStep>>
  /** how many more times the revision lookup of a run dies (a defect in the actor) */
  readonly defects: Ref.Ref<number>
}

/** The runtime over memory, with these run budgets. */
const runtime = (world: World, runs: Partial<RunConfig> = {}) =>
  CellsWithoutDependencies.pipe(
    // the start's reads one by one, through the stubs below (the statement itself: the HTTP suites)
    Layer.provide(DispatchReadsOfServices),
    Layer.provideMerge(RunStoreMemory),
    Layer.provide(StepEngine.layerWith()),
    Layer.provide(
      makeTestLayer(Agents)({
        revisionContext: (id) =>
          Effect.flatMap(Ref.getAndUpdate(world.defects, (n) => Math.max(0, n - 1)), (defects) =>
            defects > 0
              ? Effect.die("the revision lookup broke")
              : Effect.succeed({
                instructions: "",
                tool_ids: world.revisions.get(id)?.some((s) => s.type === "tool_call") ? [lookupTool.id] : [],
                model_profile_id: "mp_unit",
                provider: "scripted" as const,
                model: "scripted-1",
                settings: { steps: world.revisions.get(id) ?? [] },
                credential_ciphertext: null,
                credential_iv: null,
                credential_tag: null
              })),
        credentialOfContext: () => Effect.succeedNone
      })
    ),
    Layer.provide(makeTestLayer(Platform)({ authorization: () => Ref.get(world.authorized) })),
    Layer.provide(makeTestLayer(PlatformRepo)({ nextCellGeneration: () => Effect.succeed(1) })),
    Layer.provide(makeTestLayer(QuotasRepo)({ limits: (_, defaults) => Effect.succeed(defaults) })),
    Layer.provide(makeTestLayer(Tools)({ toolRows: (ids) => Effect.succeed(ids.length === 0 ? [] : [lookupTool]) })),
    Layer.provide(
      makeTestLayer(ApprovalsRepo)({
        pendingOf: () => Effect.succeed(undefined),
        transition: () => Effect.void
      })
    ),
    Layer.provide(makeTestLayer(OperationsRepo)({ unsettled: () => Effect.succeed(undefined) })),
    // One runner in memory (the cluster's own test runner), on the real clock like the service's.
    Layer.provide(onRealClock(TestRunner.layer)),
    Layer.provide(
      Layer.succeed(ClusterNode, { address: "unit:0", joined: Effect.succeed(true), expirationSeconds: 10, holdsLease: () => true })
    ),
    Layer.provide(makeTestLayer(PlacementsRepo)({ placed: () => Effect.void, removed: () => Effect.void })),
    Layer.provide(makeTestLayer(Memory)({})),
    Layer.provide(makeTestLayer(Files)({})),
    Layer.provide(
      makeTestLayer(Invoker)({
        // the tool answers, and the run's key is revoked meanwhile
        invoke: () => Effect.as(Ref.set(world.authorized, "revoked"), CallOutcome.Ok({ status: 200, body: { found: true } }))
      })
    ),
    // the node's fair shares (issue 36), as the service builds them from its configuration
    Layer.provide(SharesLive),
    Layer.provideMerge(Layer.succeed(AppConfig, AppConfig.defaults({ runs: { ...defaultRunConfig, ...runs } })))
  )

const newWorld = Effect.gen(function*() {
  return {
    authorized: yield* Ref.make<"active" | "revoked" | "deleted">("active"),
    revisions: new Map<string, ReadonlyArray<ScriptedStep>>(),
    defects: yield* Ref.make(0)
  } satisfies World
})

/** Admits a run of a revision with these steps (as createRun does) and starts its actor. */
const startRun = (world: World, steps: ReadonlyArray<ScriptedStep>, at: CellId = cell) =>
  Effect.gen(function*() {
    const store = yield* RunStore
    const config = yield* AppConfig
    const now = yield* TestClock.currentTimeMillis
    const revision = yield* makeId("rev")
    world.revisions.set(revision, steps)
    const id = yield* makeId("run")
    const conversation = yield* store.insertConversation({
      id: yield* makeId("conv"),
      tenant_id: at.tenantId,
      environment: at.environment,
      workspace_id: "ws_unit",
      agent_revision_id: revision,
      created_by_key_id: "key_unit"
    })
    yield* store.admit({
      id,
      tenant_id: at.tenantId,
      environment: at.environment,
      conversation_id: conversation.id,
      key_id: "key_unit",
      user_id: null,
      input: [{ type: "text", text: "hello" }],
      item: { type: "user_message", text: "hello" },
      created_at: new Date(now),
      start_deadline_at: new Date(now + config.runs.startDeadlineSeconds * 1000),
      authorization_expires_at: new Date(now + config.runs.authorizationSeconds * 1000)
    }, config.quotas[at.environment])
    yield* (yield* Cells).send(at, new StartRun({ runId: id }))
    return id
  })

/**
 * A turn of the event loop: the actors run in their cell's lane of the node's fair scheduler
 * (issue 36), whose busy lanes are drained after the loop polled I/O, not in microtasks.
 */
const turn = Effect.async<void>((resume) => {
  const immediate = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(immediate))
})

/** Lets the actors' fibers run (no time passes). */
const settle = Effect.repeatN(Effect.zipRight(Effect.yieldNow(), turn), 200)

/**
 * Lets the actors run until the run leaves `running`: a tool call validates its input in a worker
 * thread (real time, not the TestClock), so yielding alone may not be enough. At most ~5 s.
 */
const settleRun = (id: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      yield* settle
      if ((yield* runOf(id)).status !== "running") return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    }
  })

const runOf = (id: string) => Effect.flatMap(RunStore, (store) => Effect.map(store.run(id), Option.getOrThrow))
const eventTypes = (id: string) =>
  Effect.flatMap(RunStore, (store) => Effect.map(store.eventsAfter(id, 0, 100), (events) => events.map((e) => e.type)))

describe("run actor (in memory, TestClock)", () => {
  it.effect("a scripted answer: started, message, succeeded; times stamped; the usage committed with the step", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [{ type: "text", text: "You said: {{input}}" }])
        yield* settle
        const run = yield* runOf(id)
        expect(run.status).toBe("succeeded")
        expect(run.output).toEqual([{ type: "text", text: "You said: hello" }])
        expect(run.started_at).not.toBeNull()
        expect(run.completed_at).not.toBeNull()
        expect(run.model_calls).toBe(1)
        expect(run.output_tokens).toBe(3)
        expect(yield* eventTypes(id)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("the execution budget ends a run that is still working: expired, execution_deadline_exceeded", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [{ type: "sleep", seconds: 300 }, { type: "sleep", seconds: 300 }, {
          type: "text",
          text: "too late"
        }])
        yield* settle
        expect((yield* runOf(id)).status).toBe("running")
        yield* TestClock.adjust("299 seconds")
        yield* settle
        expect((yield* runOf(id)).status).toBe("running")
        yield* TestClock.adjust("2 seconds")
        yield* settle
        const run = yield* runOf(id)
        expect(run.status).toBe("expired")
        expect(run.status_reason).toBe("execution_deadline_exceeded")
        expect(run.output).toBeNull()
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("the total authorization wins when it is earlier: expired, authorization_expired", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [{ type: "sleep", seconds: 300 }, { type: "sleep", seconds: 300 }, {
          type: "text",
          text: "too late"
        }])
        yield* TestClock.adjust("121 seconds")
        yield* settle
        const run = yield* runOf(id)
        expect(run.status).toBe("expired")
        expect(run.status_reason).toBe("authorization_expired")
      }).pipe(Effect.provide(runtime(world, { authorizationSeconds: 120 })))
    }))

  it.effect("a queued run that gets no execution slot before its start deadline: expired, start_deadline_exceeded", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const busy = yield* startRun(world, [{ type: "sleep", seconds: 300 }, { type: "text", text: "slow" }])
        const waiting = yield* startRun(world, [{ type: "text", text: "quick" }])
        yield* settle
        expect((yield* runOf(waiting)).status).toBe("queued")
        yield* TestClock.adjust("101 seconds")
        yield* settle
        const run = yield* runOf(waiting)
        expect(run.status).toBe("expired")
        expect(run.status_reason).toBe("start_deadline_exceeded")
        expect(run.started_at).toBeNull()
        expect((yield* runOf(busy)).status).toBe("running")
      }).pipe(Effect.provide(runtime(world, { maxActiveRunsPerCell: 1, startDeadlineSeconds: 100 })))
    }))

  it.effect("revocation is checked before every model call: revoked during a tool call, the run fails before its next step", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [
          { type: "tool_call", tool: "lookup", input: { q: "order 1" } },
          { type: "text", text: "never said" }
        ])
        yield* settleRun(id)
        const run = yield* runOf(id)
        expect(run.status).toBe("failed")
        expect(run.status_reason).toBe("authorization_revoked")
        expect(run.model_calls).toBe(1)
        expect(run.tool_calls).toBe(1)
        expect(yield* eventTypes(id)).toEqual([
          "run.queued",
          "run.started",
          "run.message",
          "run.tool_call.started",
          "run.tool_call.completed",
          "run.failed"
        ])
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("a key revoked before the start: the run fails without a model call", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Ref.set(world.authorized, "revoked")
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [{ type: "text", text: "never said" }])
        yield* settle
        const run = yield* runOf(id)
        expect(run.status).toBe("failed")
        expect(run.status_reason).toBe("authorization_revoked")
        expect(run.model_calls).toBe(0)
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("an environment being deleted ends its runs before their next dispatch: cancelled, environment_deleted", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Ref.set(world.authorized, "deleted")
      yield* Effect.gen(function*() {
        const id = yield* startRun(world, [{ type: "text", text: "never said" }])
        yield* settle
        const run = yield* runOf(id)
        expect(run.status).toBe("cancelled")
        expect(run.status_reason).toBe("environment_deleted")
        expect(run.model_calls).toBe(0)
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("cancel: the cell interrupts the working actor and completes the cancellation", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Effect.gen(function*() {
        const store = yield* RunStore
        const id = yield* startRun(world, [{ type: "sleep", seconds: 300 }, { type: "sleep", seconds: 300 }, {
          type: "text",
          text: "never said"
        }])
        yield* TestClock.adjust("10 seconds")
        yield* settle
        yield* store.commitAll(id, [{ trigger: Trigger.Cancel() }])
        yield* (yield* Cells).send(cell, new CancelRun({ runId: id }))
        const run = yield* runOf(id)
        expect(run.status).toBe("cancelled")
        expect(run.status_reason).toBe("cancelled_by_request")
        // nothing more happens when the interrupted sleep would have ended
        yield* TestClock.adjust("1000 seconds")
        yield* settle
        expect(yield* eventTypes(id)).toEqual(["run.queued", "run.started", "run.cancel_requested", "run.cancelled"])
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("a defect in one run's actor restarts that actor from the store; another cell is untouched", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      yield* Ref.set(world.defects, 1)
      yield* Effect.gen(function*() {
        const broken = yield* startRun(world, [{ type: "text", text: "after a restart" }])
        yield* settle
        // the defect came before the first answer, which the start commits with (issue 20): nothing was committed
        expect((yield* runOf(broken)).status).toBe("queued")
        const other = yield* startRun(world, [{ type: "text", text: "fine" }], { tenantId: "ten_other", environment: "sandbox" })
        yield* settle
        expect((yield* runOf(other)).status).toBe("succeeded")
        // the supervisor's backoff (200 ms), then the actor reads the run again and finishes it
        yield* TestClock.adjust("200 millis")
        yield* settle
        const run = yield* runOf(broken)
        expect(run.status).toBe("succeeded")
        expect(yield* eventTypes(broken)).toEqual(["run.queued", "run.started", "run.message", "run.succeeded"])
      }).pipe(Effect.provide(runtime(world)))
    }))

  it.effect("timers are the cell's: a run forks one fiber, its actor, and a working run holds only it until its budget ends it", () =>
    Effect.gen(function*() {
      const world = yield* newWorld
      const fibers = new FiberCounter()
      yield* Effect.gen(function*() {
        // the cell is started (and its timer loop armed) by a first run
        yield* startRun(world, [{ type: "text", text: "warm" }])
        yield* settle
        const quick = yield* fibers.counted(startRun(world, [{ type: "text", text: "counted" }]))
        yield* settle
        expect((yield* runOf(quick)).status).toBe("succeeded")
        // its actor only: no fiber for the slot wait nor for its start or execution deadline
        expect([fibers.started, fibers.live]).toEqual([1, 0])

        const slow = yield* fibers.counted(startRun(world, [{ type: "sleep", seconds: 300 }, { type: "sleep", seconds: 300 }, {
          type: "text",
          text: "too late"
        }]))
        yield* TestClock.adjust("10 seconds")
        yield* settle
        expect((yield* runOf(slow)).status).toBe("running")
        // working under its execution deadline (the cell's), the run holds its actor and nothing else
        expect([fibers.started, fibers.live]).toEqual([2, 1])
        yield* TestClock.adjust("291 seconds")
        yield* settle
        // the cell's loop interrupted the actor, and started it again to end the run with the budget
        expect(yield* runOf(slow)).toMatchObject({ status: "expired", status_reason: "execution_deadline_exceeded" })
        expect(fibers.live).toBe(0)
        expect((yield* eventTypes(slow)).at(-1)).toBe("run.expired")
      }).pipe(Effect.provide(runtime(world)), Effect.supervised(fibers))
    }))
})

/**
 * Counts the fibers started (and still running) by what runs under `counted`: a run started there
 * (on this node, its cell is called in the caller's fiber) forks its actor with the caller's
 * FiberRefs, and everything the actor forks inherits them. The runtime's other fibers are not counted.
 */
class FiberCounter extends Supervisor.AbstractSupervisor<void> {
  started = 0
  live = 0
  value = Effect.void
  readonly counted = Effect.annotateLogs("fiber_counter", this)
  private readonly mine = new Set<number>()
  override onStart<A, E, R>(
    _context: Context.Context<R>,
    _effect: Effect.Effect<A, E, R>,
    _parent: Option.Option<Fiber.RuntimeFiber<any, any>>,
    fiber: Fiber.RuntimeFiber<A, E>
  ) {
    if (Option.getOrUndefined(HashMap.get(fiber.getFiberRef(FiberRef.currentLogAnnotations), "fiber_counter")) !== this) return
    this.mine.add(fiber.id().id)
    this.started++
    this.live++
  }
  override onEnd<A, E>(_exit: Exit.Exit<A, E>, fiber: Fiber.RuntimeFiber<A, E>) {
    if (this.mine.delete(fiber.id().id)) this.live--
  }
}
