/**
 * Conversations and runs (contract 2.3, 3.1, 4 rules 1-3 and 8, 6; decisions D7, D8, D16).
 *
 * A run is durable before 202 is returned: admission commits the run, its `run.queued` event and
 * the user's input in one transaction, then asks the cell to start the run's actor. If this process
 * dies right after, recovery at the next start finds the queued run. Nothing here executes a run.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Option, Schema } from "effect"

import { ActorSessions } from "./ActorSessions.js"
import { Agents } from "./Agents.js"
import { Cells, tellVia } from "./Cells/Cells.js"
import { CancelRun, getQuotaLimits, OpenStream, StartRun } from "./Cells/Protocol.js"
import { AppConfig } from "./Config/AppConfig.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { type CreateRun, type Run, Run as RunSchema, type RunEvent } from "./Domain/Runs.js"
import { isTerminal, RunStatus, Trigger } from "./Domain/RunState.js"
import { Files } from "./Files.js"
import { Alarms } from "./Kernel/Alarms.js"
import { Conflict, forbidden, invalid, notFound, RateLimited } from "./Kernel/Errors.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { Principal } from "./Kernel/Principal.js"
import { afterCommit, answerAfterCommit, setResponseHeader, type StoredResponse } from "./Kernel/UnitOfWork.js"
import { Platform } from "./Platform.js"
import { quotaExceeded } from "./Quotas.js"
import { terminalRunResponse } from "./Runs/Api.js"
import { EventBus, EXPIRED, type Followed, MISSED } from "./Runs/EventBus.js"
import { admittedInput } from "./Runs/Input.js"
import * as Repo from "./Runs/RunStore.js"
import { StreamHub } from "./Runs/Stream.js"

const runNotFound = notFound("run", "run_id")
const invalidCursor = (param: string) =>
  invalid("invalid_cursor", "The cursor or event id does not belong to this run's event history", param)

export const runPath = (p: { tenantId: string; environment: string }, runId: string) =>
  `/v1/tenants/${p.tenantId}/environments/${p.environment}/runs/${runId}`

/** `Prefer: wait=N` (D7): N in 1..10 seconds, larger is treated as 10. */
export const preferredWait = (prefer: string | undefined): number | undefined => {
  const match = prefer?.match(/(?:^|[,;\s])wait\s*=\s*"?(\d+)"?/i)
  if (!match) return undefined
  const n = Number(match[1])
  return n >= 1 ? Math.min(n, 10) : undefined
}

/** What a stream request says: its `Accept`, and where to resume (`Last-Event-ID` wins over `cursor`). */
export interface StreamRequest {
  readonly accept: string | undefined
  readonly lastEventId: string | undefined
  readonly cursor: string | undefined
}

const isRunStatus = Schema.is(RunStatus)

export class Runs extends Effect.Service<Runs>()("Runs", {
  effect: Effect.gen(function*() {
    const repo = yield* Repo.RunStore
    const bus = yield* EventBus
    const alarms = yield* Alarms
    const cells = yield* Cells
    const config = yield* AppConfig
    const actors = yield* ActorSessions
    const platform = yield* Platform
    const agents = yield* Agents
    const files = yield* Files
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const visible = (p: Principal, workspaceId: string) =>
      Effect.map(platform.allowedWorkspace(p), Option.match({ onNone: () => true, onSome: (w) => w === workspaceId }))

    const runRow = (p: Principal, runId: string) =>
      Effect.gen(function*() {
        const row = yield* repo.runOfCell(p.tenantId, p.environment, runId)
        if (Option.isNone(row) || !(yield* visible(p, row.value.workspace_id))) return yield* runNotFound
        return row.value
      })

    // ---- conversations -------------------------------------------------------------------------
    const createConversation = (p: Principal, body: { workspace_id: string; agent_revision_id: string }) =>
      Effect.gen(function*() {
        const workspace = yield* agents.getWorkspace(p, body.workspace_id)
        if (!(yield* visible(p, workspace.id))) {
          return yield* forbidden("workspace_not_allowed", "This key can act only in its own (quickstart) workspace")
        }
        const revisionWorkspace = yield* agents.revisionWorkspace(p, body.agent_revision_id)
        if (revisionWorkspace === undefined) return yield* notFound("agent revision", "agent_revision_id")
        if (revisionWorkspace !== workspace.id) {
          return yield* invalid(
            "revision_not_in_workspace",
            "The agent revision belongs to an agent of another workspace",
            "agent_revision_id"
          )
        }
        const row = yield* repo.insertConversation({
          id: yield* makeId("conv"),
          tenant_id: p.tenantId,
          environment: p.environment,
          workspace_id: workspace.id,
          agent_revision_id: body.agent_revision_id,
          created_by_key_id: p.keyId
        })
        return Repo.toConversation(row)
      })

    const getConversation = (p: Principal, id: string) =>
      Effect.gen(function*() {
        const row = yield* repo.conversation(p.tenantId, p.environment, id)
        if (Option.isNone(row) || !(yield* visible(p, row.value.workspace_id))) {
          return yield* notFound("conversation", "conversation_id")
        }
        return Repo.toConversation(row.value)
      })

    // ---- runs ------------------------------------------------------------------------------------
    /** Whether a committed event ends its run. */
    const endsRun = (e: Repo.EventRow) => e.type !== "run.reconciled" && isRunStatus(e.data.status) && isTerminal(e.data.status)

    /**
     * Waits up to `millis` for `runId`'s end, as `followed` tells it (followed from before the run's
     * actor was told to start, so none is missed; when the bus says some may have gone
     * unannounced, the run is read); the deadline is an alarm on the Clock that expires the
     * following, not a timer fiber. The run as it then is.
     */
    const awaitTerminal = (followed: Followed, runId: string, millis: number) =>
      Effect.gen(function*() {
        /** "ended" on its end, EXPIRED at the deadline; on MISSED, the run read then if it had ended (else it waits on). */
        const ending: Effect.Effect<"ended" | typeof EXPIRED | Option.Option<Repo.RunRow>, SqlError> = Effect.flatMap(
          followed.next,
          (signal) =>
            signal !== MISSED
              ? Effect.succeed(signal)
              : Effect.flatMap(repo.run(runId), (row) => Option.isSome(row) && isTerminal(row.value.status) ? Effect.succeed(row) : ending)
        )
        const cancelAlarm = alarms.after(millis, followed.expire)
        const terminal = yield* Effect.ensuring(ending, Effect.sync(cancelAlarm))
        if (terminal === EXPIRED) return Option.getOrUndefined(yield* repo.run(runId))
        // ended: as its ending commit wrote it when that was on this node and it is already kept
        // (the notification may come first: then it is read)
        return Option.getOrUndefined(terminal === "ended" ? yield* repo.ended(runId) : terminal)
      })

    /**
     * Once the admission committed, the cell starts the run's actor; with `Prefer: wait=N` the
     * request then waits up to N seconds (an alarm on the Clock, not a timer fiber) and answers 200
     * with the run if it ended (else the 202).
     */
    const admitted = (p: Principal, run: Run, prefer: string | undefined) =>
      Effect.gen(function*() {
        const wait = preferredWait(prefer)
        // With a wait, the run's events are followed from before its actor starts (after the commit:
        // a rolled back admission subscribes to nothing); the continuation ends the subscription.
        let followed: Followed | undefined
        if (wait !== undefined) yield* afterCommit(Effect.sync(() => void (followed = bus.follow(run.id, endsRun))))
        // (the run id is ours: the command is not validated again)
        yield* afterCommit(tellVia(cells, p, new StartRun({ runId: run.id }, true)))
        yield* setResponseHeader("location", runPath(p, run.id))
        if (wait !== undefined) {
          yield* setResponseHeader("preference-applied", `wait=${wait}`)
          yield* answerAfterCommit(
            Effect.suspend(() => followed === undefined ? Effect.succeed(undefined) : awaitTerminal(followed, run.id, wait * 1000)).pipe(
              Effect.flatMap((waited) =>
                waited !== undefined && isTerminal(waited.status)
                  ? Effect.asSome(terminalRunResponse(Repo.toRun(waited)))
                  : Effect.succeedNone
              ),
              Effect.ensuring(Effect.sync(() => followed?.stop())),
              Effect.orDie
            )
          )
        }
        return run
      })

    const createRun = (p: Principal, conversationId: string, body: CreateRun, prefer: string | undefined, actorToken: string | undefined) =>
      Effect.gen(function*() {
        // The conversation is read by the admission's statement (404 when it is not the key's to see).
        const workspace = Option.getOrUndefined(yield* platform.allowedWorkspace(p))
        const item = yield* admittedInput(files, p, body.input, workspace)
        // On behalf of a user when an actor token comes along (its tool calls act for the user).
        const user = actorToken === undefined ? undefined : yield* actors.requireActor(p, actorToken)
        const at = yield* now
        const id = yield* makeId("run")
        const startDeadline = new Date(at.getTime() + config.runs.startDeadlineSeconds * 1000)
        const authorizationExpires = new Date(at.getTime() + config.runs.authorizationSeconds * 1000)
        const limits = yield* cells.send(p, getQuotaLimits)
        const admission = yield* repo.admit({
          id,
          tenant_id: p.tenantId,
          environment: p.environment,
          conversation_id: conversationId,
          workspace,
          key_id: p.keyId,
          user_id: user?.id ?? null,
          input: body.input,
          created_at: at,
          start_deadline_at: startDeadline,
          authorization_expires_at: authorizationExpires,
          item
        }, limits)
        if (admission._tag === "ConversationNotFound") return yield* notFound("conversation", "conversation_id")
        if (admission._tag === "ConversationBusy") {
          return yield* new Conflict({
            code: "conversation_busy",
            message: "This conversation already has a run that is not finished; wait for it or cancel it",
            param: "conversation_id"
          })
        }
        // 429: the request's transaction rolls back, the run written by the admission with it
        if (admission._tag === "OverQuota") return yield* quotaExceeded(admission.quota, limits[admission.quota], at)
        // The run as admitted (its actor will move it on; GET shows the latest).
        return yield* admitted(p, {
          id,
          object: "run",
          conversation_id: conversationId,
          agent_revision_id: admission.conversation.agent_revision_id,
          user_id: user?.id ?? null,
          status: "queued",
          status_reason: null,
          input: body.input,
          output: null,
          required_action: null,
          usage: { input_tokens: 0, output_tokens: 0, model_calls: 0, tool_calls: 0 },
          created_at: toIso(at),
          started_at: null,
          completed_at: null,
          start_deadline_at: toIso(startDeadline),
          execution_deadline_at: null,
          authorization_expires_at: toIso(authorizationExpires),
          last_event_id: admission.eventId
        }, prefer)
      })

    const getRun = (p: Principal, runId: string) => Effect.map(runRow(p, runId), Repo.toRun)

    /**
     * D7: a non-terminal run goes `cancel_requested` (durably, with its event), then its cell stops
     * the actor and completes the cancellation. A run already `cancel_requested` answers the same.
     */
    const cancelRun = (p: Principal, runId: string) =>
      Effect.gen(function*() {
        const row = yield* runRow(p, runId)
        if (isTerminal(row.status)) {
          return yield* new Conflict({
            code: "run_not_cancellable",
            message: `The run is ${row.status}; only a run that has not finished can be cancelled`,
            param: "run_id"
          })
        }
        if (row.status !== "cancel_requested") {
          yield* repo.commitAll(runId, [{ trigger: Trigger.Cancel() }])
        }
        // Whatever won the race (the cancel, or the run finishing first), answer with the run as it is.
        const after = Option.getOrThrow(yield* repo.run(runId))
        if (after.status === "cancel_requested") {
          yield* afterCommit(Effect.asVoid(Effect.forkDaemon(tellVia(cells, p, new CancelRun({ runId })))))
        } else if (isTerminal(after.status) && after.status !== "cancelled") {
          return yield* new Conflict({
            code: "run_not_cancellable",
            message: `The run is ${after.status}; only a run that has not finished can be cancelled`,
            param: "run_id"
          })
        }
        yield* setResponseHeader("location", runPath(p, runId))
        return Repo.toRun(after)
      })

    // ---- events ----------------------------------------------------------------------------------
    /** The sequence after which to read: from a cursor / Last-Event-ID of this run (D8). */
    const afterSequence = (runId: string, id: string | undefined, param: string) =>
      Effect.gen(function*() {
        if (id === undefined || id === "") return 0
        const position = yield* repo.eventPosition(id)
        if (Option.isNone(position) || position.value.run_id !== runId) return yield* invalidCursor(param)
        return position.value.sequence
      })

    const listEvents = (p: Principal, runId: string, params: { limit?: string | undefined; cursor?: string | undefined }) =>
      Effect.gen(function*() {
        yield* runRow(p, runId)
        const after = yield* afterSequence(runId, params.cursor, "cursor")
        const limit = params.limit === undefined ? 50 : Number(params.limit)
        const rows = yield* repo.eventsAfter(runId, after, limit + 1)
        const items = rows.slice(0, limit)
        return {
          items: items.map(Repo.toEvent),
          next_cursor: rows.length > limit ? items[items.length - 1]!.id : null
        }
      })

    const streams = yield* StreamHub

    /**
     * The run's events as an SSE body (D8), after `Last-Event-ID` or `cursor`; takes one of the
     * cell's stream slots or fails with 429 `stream_limit_reached` (contract part 8).
     */
    const streamEvents = (p: Principal, runId: string, request: StreamRequest) =>
      Effect.gen(function*() {
        if (request.accept !== undefined && !/text\/event-stream|\*\/\*/i.test(request.accept)) {
          return yield* invalid("accept_event_stream_required", "Send `Accept: text/event-stream` to stream events", "accept")
        }
        const { cursor, lastEventId } = request
        yield* runRow(p, runId)
        const after = lastEventId !== undefined && lastEventId !== ""
          ? yield* afterSequence(runId, lastEventId, "Last-Event-ID")
          : yield* afterSequence(runId, cursor, "cursor")
        const reply = yield* cells.send(p, new OpenStream({ actorId: p.actor.id }))
        if (!reply.opened) {
          const limit = reply.limit === "cell"
            ? `${config.runs.streamsPerCell} open streams per environment`
            : `${config.runs.streamsPerActor} open streams per caller`
          yield* setResponseHeader("retry-after", "1")
          return yield* new RateLimited({ code: "stream_limit_reached", message: `Too many open event streams: at most ${limit}` })
        }
        return yield* streams.open(p, runId, after)
      })

    /**
     * The replay of a `Prefer: wait` createRun (D5, D7): its record holds the 202 stored at
     * admission, and what the waiting request answered follows from the run: 200 with the run when
     * it ended within the wait (counted from its admission), else the 202. So the 200 is not
     * written a second time after the wait (issue 20: one write transaction less per run); the
     * run's JSON is as it is now (a terminal run no longer changes), in the envelope of the first
     * request (its `request_id`). None: replay the stored answer as it is (the 202, or any other
     * answer of createRun). The handler's reading of its replays (`inCell`'s refine).
     */
    const waitedReplay = (stored: StoredResponse) =>
      Effect.gen(function*() {
        if (stored.status !== 202) return Option.none<StoredResponse>()
        const wait = preferredWait(stored.headers["preference-applied"])
        let first: { data?: { id?: unknown; created_at?: unknown }; request_id?: unknown }
        try {
          first = JSON.parse(stored.body)
        } catch {
          return Option.none<StoredResponse>()
        }
        const id = first.data?.id
        const admittedAt = typeof first.data?.created_at === "string" ? Date.parse(first.data.created_at) : NaN
        if (wait === undefined || typeof id !== "string" || Number.isNaN(admittedAt)) return Option.none<StoredResponse>()
        const deadline = admittedAt + wait * 1000
        let row = Option.getOrUndefined(yield* repo.run(id))
        // Within the wait the answer is not decided yet (the first request may still be waiting, or
        // died waiting): the replay waits as it would have, so every replay answers the same.
        if (row !== undefined && !isTerminal(row.status) && (yield* Clock.currentTimeMillis) < deadline) {
          row = yield* Effect.acquireUseRelease(
            Effect.sync(() => bus.follow(id, endsRun)),
            (followed) =>
              Effect.gen(function*() {
                const now = yield* Clock.currentTimeMillis
                const current = Option.getOrUndefined(yield* repo.run(id))
                if (current === undefined || isTerminal(current.status)) return current
                return yield* awaitTerminal(followed, id, Math.max(0, deadline - now))
              }),
            ({ stop }) => Effect.sync(stop)
          )
        }
        if (row === undefined || !isTerminal(row.status) || row.completed_at === null) return Option.none<StoredResponse>()
        if (row.completed_at.getTime() > admittedAt + wait * 1000) return Option.none<StoredResponse>()
        const data = yield* Schema.encode(RunSchema)(Repo.toRun(row))
        return Option.some({ ...stored, status: 200, body: JSON.stringify({ data, request_id: first.request_id }) })
      }).pipe(Effect.orDie)

    return {
      waitedReplay,
      createConversation: (p: Gated<Principal>, body: { workspace_id: string; agent_revision_id: string }) =>
        dieOnSqlError(createConversation(p, body)),
      getConversation: (p: Principal, id: string) => dieOnSqlError(getConversation(p, id)),
      createRun: (p: Gated<Principal>, conversationId: string, body: CreateRun, prefer: string | undefined, actorToken?: string) =>
        dieOnSqlError(createRun(p, conversationId, body, prefer, actorToken)),
      getRun: (p: Principal, runId: string) => dieOnSqlError(getRun(p, runId)),
      cancelRun: (p: Gated<Principal>, runId: string) => dieOnSqlError(cancelRun(p, runId)),
      listEvents: (p: Principal, runId: string, params: { limit?: string | undefined; cursor?: string | undefined }) =>
        dieOnSqlError(listEvents(p, runId, params)),
      streamEvents: (p: Principal, runId: string, request: StreamRequest) => dieOnSqlError(streamEvents(p, runId, request))
    } as const
  }),
  dependencies: [
    Alarms.Default,
    EventBus.Default,
    StreamHub.Default,
    ActorSessions.Default,
    Platform.Default,
    Agents.Default,
    Files.Default
  ]
}) {}

export type { RunEvent }

// ---- the front door: what other capabilities and the Runtime use of Runs (scripts/layers.ts) ----
export { admittedInput } from "./Runs/Input.js"
export { RunRow, RunStore, toRun } from "./Runs/RunStore.js"
export type { Commit, UsageRecordInput } from "./Runs/RunStore.js"
export { stepCommits } from "./Runs/StepCommits.js"
export type { StepModel } from "./Runs/StepCommits.js"
