/**
 * A run actor: drives one run through the state machine, from whatever the database says.
 *
 * It keeps nothing the database does not have: started again (after a defect, a restart or a
 * crash) it reads the run and its conversation and continues from the last committed step. Each
 * step commits its event, conversation items and usage records together (RunStore.commitAll), and
 * every change of status goes through the state machine under the run's row lock, so the actor and
 * a concurrent cancel request cannot both win.
 *
 * Time budgets (contract part 8, the earliest wins) are deadlines on Effect's Clock, held by the
 * cell (one loop per cell for all its runs, src/Runtime/Cell.ts), not timers raced by the actor:
 *   - queued: until min(start deadline, authorization expiry), waiting for a cell execution slot;
 *   - running: until min(execution deadline, authorization expiry).
 * The actor registers its phase's deadline with the cell and clears it when it leaves the phase
 * (`within`). A budget that runs out: the cell interrupts the work in flight and starts the actor
 * again with the budget (`expired`), which ends the run `expired`, with the budget as
 * `status_reason`. Before starting and before each model call, the key that created the run is
 * checked again: revoked -> `failed` (`authorization_revoked`); its environment or tenant being
 * deleted -> `cancelled` (`environment_deleted`, D19).
 */
import { Clock, Effect, Either, Option, Schedule, Schema } from "effect"

import { Agents } from "../Agents.js"
import { ApprovalsRepo } from "../Approvals.js"
import { AppConfig } from "../Config/AppConfig.js"
import { ConversationItem, type StepResult } from "../Domain/Conversation.js"
import { MEMORY_TOOLS } from "../Domain/Memory.js"
import type { QuotaLimits } from "../Domain/Quotas.js"
import type * as RunState from "../Domain/RunState.js"
import { Trigger } from "../Domain/RunState.js"
import { retried } from "../Kernel/Retried.js"
import { sharedBy, Shares } from "../Kernel/Shares.js"
import { traced } from "../Kernel/Spans.js"
import { answersAtOnce, StepEngine } from "../Models.js"
import { Platform } from "../Platform.js"
import type { Authorization } from "../Platform/Queries.js"
import { type Commit, type RunRow, RunStore, stepCommits, type StepModel } from "../Runs.js"
import { Tools } from "../Tools.js"
import { DispatchReads, type FirstDispatch } from "./DispatchReads.js"
import * as RunFiles from "./RunFiles.js"
import * as ToolCalls from "./ToolCalls.js"

const Items = Schema.Array(ConversationItem)

/** `status_reason` of a run ended by a model error. */
const modelFailureReason: Record<string, string> = {
  ModelRateLimited: "model_rate_limited",
  ModelUnavailable: "model_unavailable",
  ModelInvalidResponse: "model_invalid_response",
  ModelAuthFailed: "model_authentication_failed",
  ModelFailed: "model_failed"
}

/** The earliest of the applicable deadlines, and the budget it belongs to. */
const earliest = (...candidates: ReadonlyArray<readonly [Date | null, RunState.Budget]>) =>
  candidates
    .filter((c): c is readonly [Date, RunState.Budget] => c[0] !== null)
    .reduce((a, b) => (b[0].getTime() < a[0].getTime() ? b : a))

/**
 * A window of the conversation starts at a user message: earlier answers or tool results cut off
 * from the calls that asked for them would confuse the model (and providers refuse them).
 */
const fromFirstUserMessage = (items: ReadonlyArray<ConversationItem>) => {
  const first = items.findIndex((i) => i.type === "user_message")
  return first <= 0 ? items : items.slice(first)
}

/** How a run ends when it may no longer act (undefined: it may). */
export const endingOf = (authorization: Authorization): Trigger | undefined =>
  authorization === "active"
    ? undefined
    : authorization === "deleted"
    ? Trigger.EnvironmentDeleted()
    : Trigger.Fail({ reason: "authorization_revoked" })

/** What an actor hands over to its next start by the cell, when a budget ran out under it. */
export interface ActorMemory {
  /** the run's start, not committed yet (see `pendingStart`) */
  pendingStart?: Commit | undefined
}

export interface ActorOptions {
  /** The cell's execution slots: a queued run waits for one within its start deadline. */
  readonly slots: Effect.Semaphore
  readonly cellGeneration: number
  /** Revives this run's actor at `at` (an approval's expiry): the cell's alarm, not a held fiber. */
  readonly wakeAt: (runId: string, at: Date) => Effect.Effect<void>
  /**
   * Sets this run's deadline in the cell's schedule (it replaces the one set before): when it
   * passes, the cell interrupts this actor and starts it again with `expired` = `budget`.
   */
  readonly deadline: (at: Date, budget: RunState.Budget) => Effect.Effect<void>
  /** Removes this run's deadline from the cell's schedule (the phase it covered is over). */
  readonly clearDeadline: Effect.Effect<void>
  /** The budget that ran out while the actor's previous start worked: this start ends the run with it. */
  readonly expired: RunState.Budget | undefined
  /** Kept by the cell across the actor's starts (for an expiry: the start the run was driven with). */
  readonly memory: ActorMemory
  /** The cell's quota limits now (D16; D20: its files and memory values fit `storage_bytes`). */
  readonly quotaLimits: Effect.Effect<QuotaLimits>
}

export const run = (runId: string, options: ActorOptions) =>
  Effect.gen(function*() {
    const repo = yield* RunStore
    const engine = yield* StepEngine
    const agents = yield* Agents
    const platform = yield* Platform
    const tools = yield* Tools
    const approvals = yield* ApprovalsRepo
    const config = yield* AppConfig
    const reads = yield* DispatchReads
    const shares = yield* Shares
    // (issue 36) the work done here is granted by the cell's share of the node's step executions;
    // a wait outside the process (a remote model) by its share of the calls out
    const asStep = sharedBy(shares, "steps")
    const asCallOut = sharedBy(shares, "outbound")
    const budgets = config.runs

    /**
     * Commits, fenced by the cell's generation (a cell restored elsewhere interrupts this actor); a
     * refusal means someone else (a cancel, a budget) changed the run first.
     */
    const commit = <E = never>(...commits: ReadonlyArray<Commit<E>>) =>
      Effect.suspend(() => {
        const start = memory.pendingStart
        memory.pendingStart = undefined
        return repo.commitAll(runId, start === undefined ? commits : [start, ...commits], options.cellGeneration).pipe(
          Effect.map(Either.isRight),
          // nothing was committed (a file that did not fit rolled it back): the start goes with the next one
          Effect.tapError(() => Effect.sync(() => void (memory.pendingStart ??= start)))
        )
      })

    /**
     * The run's start, not committed yet: it goes with the run's next commit (issue 20: a step that
     * answers at once commits start, answer and end in one transaction). Anything that leaves the
     * process (a remote model, a tool, a sleep) commits it first (`flushStart`), so the run is
     * `running` while it waits. Kept in the process only, so a crash before the commit leaves the run
     * `queued`, and the next owner starts it again. It is in `memory` (the cell's) so that when a
     * budget runs out under it, the actor started again to end the run commits it first, as the
     * interrupted one would have; any other start of the actor (a defect) reads the run afresh.
     */
    const memory = options.memory
    if (options.expired === undefined) memory.pendingStart = undefined
    /** Commits a pending start on its own; false when the run may no longer be driven by this actor. */
    const flushStart = Effect.suspend(() => (memory.pendingStart === undefined ? Effect.succeed(true) : commit()))

    const load = Effect.map(repo.starting(runId), Option.getOrUndefined)

    /** A budget ran out (an unknown write outcome still wins: `outcome_unknown`). */
    const expire = (budget: RunState.Budget) =>
      ToolCalls.endUnfinished(commit, runId, Trigger.Expire({ budget }), `the ${budget} budget ran out while the outcome was unknown`)

    /**
     * Runs `work` under `deadline`, which the cell holds (no timer of the actor's own): already past,
     * the run expires at once; passing during `work`, the cell interrupts it and starts this actor
     * again with `expired` (above).
     */
    const within = <A, E, R>(deadline: Date, budget: RunState.Budget, work: Effect.Effect<A, E, R>) =>
      Effect.gen(function*() {
        if (deadline.getTime() <= (yield* Clock.currentTimeMillis)) return yield* expire(budget)
        yield* options.deadline(deadline, budget)
        yield* work
      }).pipe(Effect.ensuring(options.clearDeadline))

    /** The trigger that ends the run when it may no longer act, or undefined when it may. */
    const unauthorized = (row: RunRow) => Effect.map(platform.authorization(row), endingOf)

    // ---- the model calls and what they commit --------------------------------------------------
    /**
     * `first`: what the start read (the key, just checked, the revision and the window), which
     * covers the first dispatch; without it (a resumed run) everything is read here.
     */
    const drive = (row: RunRow, first: FirstDispatch | undefined) =>
      Effect.gen(function*() {
        const agent = first === undefined ? yield* agents.revisionContext(row.agent_revision_id) : first.revision
        if (agent === undefined || row.input === null) {
          yield* commit({ trigger: Trigger.Interrupt({ reason: "admitted_content_missing" }) })
          return
        }
        const credential = yield* agents.credentialOfContext(agent)
        const offered = yield* tools.toolRows(agent.tool_ids)
        const memory = agent.memory === true
        const definitions = [
          ...offered.map((t) => ({
            name: t.name,
            ...(t.description === null ? {} : { description: t.description }),
            input_schema: t.input_schema
          })),
          // the built-in memory tools (D14) of a revision with memory
          ...(memory ? MEMORY_TOOLS : [])
        ]
        const toolEnv: ToolCalls.ToolCallEnv = {
          row,
          tools: offered,
          cellGeneration: options.cellGeneration,
          commit,
          unauthorized: unauthorized(row),
          wakeAt: (at) => options.wakeAt(runId, at),
          memory,
          storageLimit: Effect.map(options.quotaLimits, (limits) => limits.storage_bytes)
        }
        // The input's files are the run's own user message's: read once per run, not per model call.
        let inputs: ReadonlyMap<string, Uint8Array> | undefined
        // the start's reads serve the first dispatch only (not the one after resolving pending calls)
        let fresh = first
        for (let i = 0; i < budgets.maxSteps; i++) {
          const ending = fresh === undefined ? yield* unauthorized(row) : undefined
          if (ending !== undefined) {
            yield* commit({ trigger: ending })
            return
          }
          const window = fresh === undefined ? yield* repo.items(row.conversation_id, budgets.contextBytes) : fresh.items
          fresh = undefined
          const decoded = yield* Effect.either(Effect.map(Schema.decodeUnknown(Items)(window), fromFirstUserMessage))
          if (Either.isLeft(decoded)) {
            yield* commit({ trigger: Trigger.Interrupt({ reason: "admitted_content_missing" }) })
            return
          }
          // Calls the model proposed and nobody answered yet come first (after a restart too).
          const pending = ToolCalls.unresolved(decoded.right)
          const conversation = decoded.right
          if (!answersAtOnce({ profile: agent, conversation }) || pending.length > 0) {
            if (!(yield* flushStart)) return
          }
          if (pending.length > 0) {
            for (const call of pending) {
              if ((yield* ToolCalls.resolve(toolEnv, call)) === "stop") return
            }
            i--
            continue
          }
          const files = inputs ??= yield* RunFiles.inputFiles(row, conversation)
          const local = answersAtOnce({ profile: agent, conversation })
          const result = yield* engine.step({
            profile: { id: agent.model_profile_id, provider: agent.provider, model: agent.model, settings: agent.settings },
            credential,
            instructions: agent.instructions,
            tools: definitions,
            conversation,
            files,
            runId
          }).pipe(
            local ? asStep : asCallOut,
            (step) =>
              retried(step, {
                schedule: Schedule.exponential("1 second").pipe(Schedule.intersect(Schedule.recurs(2))),
                while: (e) => e._tag === "ModelRateLimited" || e._tag === "ModelUnavailable"
              }),
            Effect.either
          )
          if (Either.isLeft(result)) {
            const e = result.left
            yield* commit({
              trigger: Trigger.Fail({ reason: modelFailureReason[e._tag] ?? "model_failed" }),
              data: {
                error: {
                  type: e._tag,
                  message: e.message,
                  ...(e.provider_request_id === undefined ? {} : { provider_request_id: e.provider_request_id })
                }
              }
            })
            return
          }
          const step = result.right
          const done = yield* asStep(Effect.gen(function*() {
            const produced = yield* RunFiles.producedFiles(row, step.files, yield* toolEnv.storageLimit)
            return yield* commitStep(agent, step, produced)
          }))
          if (done) return
        }
        yield* commit({ trigger: Trigger.Fail({ reason: "max_steps_exceeded" }) })
      })

    /** Commits a step's result (`stepCommits`); `true` when the run is over (or no longer ours to drive). */
    const commitStep = (
      agent: StepModel,
      result: StepResult,
      /** the files of the answer (D13), committed before it */
      files: ReadonlyArray<RunFiles.OutputFile>
    ) => {
      const step = stepCommits(agent, result)
      return Effect.as(step.withFiles ? RunFiles.committedWithFiles(commit, files, step.commits) : commit(...step.commits), step.ends)
    }

    // ---- the phases --------------------------------------------------------------------------
    const phaseQueued = (row: RunRow) =>
      Effect.gen(function*() {
        const [deadline, budget] = earliest(
          [row.start_deadline_at, "start_deadline_exceeded"],
          [row.authorization_expires_at, "authorization_expired"]
        )
        // The start deadline covers only the wait for an execution slot: holding one, the run starts.
        // A slot that comes when the deadline has passed (freed in the same instant) is too late: the
        // run expires, as it would have had the cell's loop ended it first.
        yield* within(
          deadline,
          budget,
          options.slots.withPermits(1)(
            Effect.zipRight(
              options.clearDeadline,
              Effect.flatMap(Clock.currentTimeMillis, (now) => now >= deadline.getTime() ? expire(budget) : starting(row))
            )
          )
        )
      })

    /** Starts a queued run that holds an execution slot, then drives it. */
    const starting = (row: RunRow) =>
      Effect.gen(function*() {
        // the key, the revision and the window in one read (DispatchReads)
        const first = yield* reads.first(row, budgets.contextBytes)
        const ending = endingOf(first.authorization)
        if (ending !== undefined) {
          yield* commit({ trigger: ending })
          return
        }
        // The start is committed with the first step's answer when that answers at once, else
        // before the step (`flushStart`); the run is driven as started from now.
        const now = yield* Clock.currentTimeMillis
        memory.pendingStart = {
          trigger: Trigger.Start(),
          data: { cell_generation: options.cellGeneration },
          executionSeconds: budgets.executionSeconds
        }
        yield* phaseRunning({
          ...row,
          status: "running",
          started_at: new Date(now),
          execution_deadline_at: new Date(now + budgets.executionSeconds * 1000)
        }, first)
      })

    const phaseRunning = (row: RunRow, first?: FirstDispatch) =>
      Effect.gen(function*() {
        const [deadline, budget] = earliest(
          [row.execution_deadline_at, "execution_deadline_exceeded"],
          [row.authorization_expires_at, "authorization_expired"]
        )
        yield* within(deadline, budget, drive(row, first))
      })

    const phaseWaiting = (row: RunRow) =>
      Effect.gen(function*() {
        const approval = yield* approvals.pendingOf(runId)
        const now = yield* Clock.currentTimeMillis
        const authorization = row.authorization_expires_at.getTime()
        const approvalEnd = approval === undefined ? authorization : approval.expires_at.getTime()
        if (Math.min(approvalEnd, authorization) > now) return yield* options.wakeAt(runId, new Date(Math.min(approvalEnd, authorization)))
        yield* expire(authorization <= approvalEnd ? "authorization_expired" : "approval_expired")
      })

    // A budget ran out while the previous start worked (the cell interrupted it): the run ends with it.
    if (options.expired !== undefined) return yield* expire(options.expired)
    const row = yield* load
    if (!row) return
    switch (row.status) {
      case "queued":
        return yield* phaseQueued(row)
      case "running":
        // Resumed after a restart or a defect: an execution slot again, the same deadlines.
        return yield* options.slots.withPermits(1)(phaseRunning(row))
      case "cancel_requested":
        // The process stopped before the cancel completed; nothing runs for this run any more.
        yield* commit({ trigger: Trigger.CompleteCancel() })
        return
      case "requires_action":
        // Nothing runs while a human decides: past the approval's expiry (or the run's
        // authorization) the run expires; before it, the cell's alarm is set and the actor ends.
        return yield* phaseWaiting(row)
      default:
        // terminal runs need nothing.
        return
    }
  }).pipe(
    // Infrastructure failures are defects: the cell restarts the actor, which reads the run again.
    Effect.catchTag("SqlError", Effect.die),
    Effect.annotateLogs({ run_id: runId }),
    // The actor's span: its model calls (`model.call`), tool calls (`tool.call`) and SQL beneath it;
    // a child of the request that started the run (createRun, an approval), else a root.
    traced("RunActor.run", { attributes: { "run.id": runId } })
  )
