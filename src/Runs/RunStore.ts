/**
 * The run store: conversations, runs, their events and conversation items, behind a tag with a
 * SQL implementation (src/Runs/Repo.ts, the product's) and an in-memory one
 * (src/Runs/RunStoreMemory.ts, for fast unit tests of the run actor), as `@effect/cluster`'s
 * `MessageStorage` has both.
 *
 * The one way a run changes is `commitAll`: on the run as it is it asks the state machine
 * (src/Domain/RunState.ts) whether each trigger applies, appends the events with the next
 * sequences, updates the run, and writes the step's conversation items and usage records
 * (src/Runs/Commit.ts plans all of it, purely). So an event, the state it reports and the usage it
 * caused are durable together or not at all, and two writers (the run actor and a cancel request)
 * are serialised.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type Effect, type Either, type Option, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { QuotaLimits, QuotaName } from "../Domain/Quotas.js"
import type { Conversation, InputContent, Run, RunEvent, TextContent } from "../Domain/Runs.js"
import * as RunState from "../Domain/RunState.js"
import { EnvironmentName, toIso } from "../Kernel/Ids.js"

export const ConversationRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  workspace_id: Schema.String,
  agent_revision_id: Schema.String,
  created_at: Rows.Time
})
export type ConversationRow = typeof ConversationRow.Type

/** Text content as stored (its limits are checked on the way in, not when a stored run is read). */
const StoredText = Schema.Array(Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }))
const StoredInput = Schema.Array(
  Schema.Union(
    Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }),
    Schema.Struct({ type: Schema.Literal("file"), file_id: Schema.String })
  )
)

export const RunRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  workspace_id: Schema.String,
  conversation_id: Schema.String,
  agent_revision_id: Schema.String,
  key_id: Schema.String,
  user_id: Schema.NullOr(Schema.String),
  status: RunState.RunStatus,
  status_reason: Schema.NullOr(Schema.String),
  input: Schema.NullOr(StoredInput),
  output: Schema.NullOr(StoredText),
  required_action: Schema.NullOr(Rows.JsonObject),
  input_tokens: Rows.Int8,
  output_tokens: Rows.Int8,
  model_calls: Schema.Number,
  tool_calls: Schema.Number,
  last_sequence: Schema.Number,
  created_at: Rows.Time,
  started_at: Rows.TimeOrNull,
  completed_at: Rows.TimeOrNull,
  start_deadline_at: Rows.Time,
  execution_deadline_at: Rows.TimeOrNull,
  authorization_expires_at: Rows.Time,
  last_event_id: Schema.NullOr(Schema.String)
})
export type RunRow = typeof RunRow.Type

export const EventRow = Schema.Struct({
  id: Schema.String,
  run_id: Schema.String,
  sequence: Schema.Number,
  type: RunState.EventType,
  data: Rows.JsonObject,
  created_at: Rows.Time
})
export type EventRow = typeof EventRow.Type

/** A usage record (D16) written with the step that caused it. */
export interface UsageRecordInput {
  readonly kind: "model_call" | "tool_call"
  readonly model_profile_id?: string | undefined
  readonly provider?: string | undefined
  readonly model?: string | undefined
  readonly tool_id?: string | undefined
  readonly input_tokens: number
  readonly output_tokens: number
}

/**
 * One trigger of a run's state machine and what the step commits with it. `E`: how its `also` may
 * refuse (the whole commit is then rolled back and fails with it).
 */
export interface Commit<E = never> {
  readonly trigger: RunState.Trigger
  /** The event's `data` (the run's new status and reason are added). */
  readonly data?: Record<string, unknown>
  readonly output?: ReadonlyArray<TextContent>
  readonly requiredAction?: Record<string, unknown> | null
  /** Items appended to the conversation the agent sees. */
  readonly items?: ReadonlyArray<unknown>
  readonly usage?: ReadonlyArray<UsageRecordInput>
  /** Set `execution_deadline_at` this many seconds after the commit (on start). */
  readonly executionSeconds?: number
  /** Set `execution_deadline_at` to this time (resuming after an approval wait, which it does not count). */
  readonly executionDeadlineAt?: Date
  /** More writes for the same transaction (an approval, a tool operation), run once the commit is allowed. */
  readonly also?: Effect.Effect<unknown, SqlError | E>
}

/**
 * What admission writes: the run, its `run.queued` event and the user's input as a conversation
 * item. The run takes its workspace and agent revision from its conversation, which must be the
 * cell's (and of `workspace` when given: a quickstart key's).
 */
/** A row of `firstDispatchQuery` as JSON, and when it was read (`performance.now()` before the statement). */
export interface FirstRead {
  readonly row: unknown
  readonly readAt: number
}

export interface Admission {
  readonly id: string
  readonly tenant_id: string
  readonly environment: EnvironmentName
  readonly conversation_id: string
  readonly workspace?: string | undefined
  readonly key_id: string
  readonly user_id: string | null
  readonly input: ReadonlyArray<InputContent>
  readonly item: unknown
  readonly created_at: Date
  readonly start_deadline_at: Date
  readonly authorization_expires_at: Date
}

/** What a run takes from its conversation. */
export interface RunConversation {
  readonly workspace_id: string
  readonly agent_revision_id: string
}

/**
 * How an admission ended. `OverQuota`: a quota of the cell (D16) had no room; the run was written
 * in the caller's transaction all the same, which must now roll back (the request answers 429).
 */
export type Admitted =
  | { readonly _tag: "Admitted"; readonly eventId: string; readonly conversation: RunConversation }
  | { readonly _tag: "ConversationNotFound" }
  | { readonly _tag: "ConversationBusy" }
  | { readonly _tag: "OverQuota"; readonly quota: QuotaName }

export interface RunStoreShape {
  readonly conversation: (tenantId: string, environment: string, id: string) => Effect.Effect<Option.Option<ConversationRow>, SqlError>
  readonly insertConversation: (
    row: Omit<ConversationRow, "created_at"> & { readonly created_by_key_id: string }
  ) => Effect.Effect<ConversationRow, SqlError>
  readonly run: (id: string) => Effect.Effect<Option.Option<RunRow>, SqlError>
  readonly runOfCell: (tenantId: string, environment: string, id: string) => Effect.Effect<Option.Option<RunRow>, SqlError>
  /**
   * The run as its actor starts: the row this process's admission of it wrote, taken once and
   * within seconds of the admission (no read), else read.
   */
  readonly starting: (id: string) => Effect.Effect<Option.Option<RunRow>, SqlError>
  /**
   * What the run's admission read for its first dispatch in its request's last statement
   * (`firstDispatchQuery` with the admitted input), taken once; undefined when it was not admitted
   * here or not lately (the actor reads it then).
   */
  readonly takeFirstRead: (id: string) => FirstRead | undefined
  /**
   * The run once it ended: the row this process's commit that ended it wrote, taken once (no
   * read), else read. For `Prefer: wait`, told of the end by the run's terminal event.
   */
  readonly ended: (id: string) => Effect.Effect<Option.Option<RunRow>, SqlError>
  /**
   * Admits a run atomically, counting it against the cell's quotas `limits` in the same statement:
   * the id of its `run.queued` event; the conversation has a non-terminal run; or a quota is used up.
   */
  readonly admit: (admission: Admission, limits: QuotaLimits) => Effect.Effect<Admitted, SqlError>
  /**
   * Applies the commits in order, atomically. `Left` when the state machine refuses one of them in
   * the run's state (then nothing is written).
   *
   * `fence`: the generation of the cell whose run actor commits. The commit is made only while the
   * run's cell is still at that generation (checked in the database, under a lock the generation's
   * bump waits for); a cell restored since, anywhere, fences it off: nothing is written and the
   * committing fiber is interrupted (its owner lost the cell; the new owner drives the run).
   */
  readonly commitAll: <E = never>(
    runId: string,
    commits: ReadonlyArray<Commit<E>>,
    fence?: number
  ) => Effect.Effect<
    Either.Either<
      { readonly status: RunState.RunStatus; readonly events: ReadonlyArray<EventRow>; readonly row: RunRow },
      RunState.TransitionRefused
    >,
    SqlError | E
  >
  /**
   * The conversation's latest items, in order (JSON, decoded by the reader): everything since its
   * latest user message, and earlier items while their stored size stays within `budgetBytes`, so
   * a long conversation is sent to the model as a bounded window.
   */
  readonly items: (conversationId: string, budgetBytes: number) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
  /** The run and sequence of an event id (for cursors and Last-Event-ID). */
  readonly eventPosition: (
    eventId: string
  ) => Effect.Effect<Option.Option<{ readonly run_id: string; readonly sequence: number }>, SqlError>
  readonly eventsAfter: (runId: string, afterSequence: number, limit: number) => Effect.Effect<ReadonlyArray<EventRow>, SqlError>
  /** Non-terminal runs, for recovery after a restart. */
  /** The unfinished runs of one cell, by id. */
  readonly openRunsOf: (tenantId: string, environment: string) => Effect.Effect<ReadonlyArray<string>, SqlError>
  readonly openRuns: Effect.Effect<
    ReadonlyArray<{ readonly id: string; readonly tenant_id: string; readonly environment: EnvironmentName }>,
    SqlError
  >
}

export class RunStore extends Context.Tag("RunStore")<RunStore, RunStoreShape>() {}

// ---- the resources rows become ----------------------------------------------------------------

const isoOrNull = (d: Date | null) => (d === null ? null : toIso(d))

export const toConversation = (r: ConversationRow): Conversation => ({
  id: r.id,
  object: "conversation",
  workspace_id: r.workspace_id,
  agent_revision_id: r.agent_revision_id,
  created_at: toIso(r.created_at)
})

export const toRun = (r: RunRow): Run => ({
  id: r.id,
  object: "run",
  conversation_id: r.conversation_id,
  agent_revision_id: r.agent_revision_id,
  user_id: r.user_id,
  status: r.status,
  status_reason: r.status_reason,
  input: r.input,
  output: r.output,
  required_action: r.required_action,
  usage: {
    input_tokens: r.input_tokens,
    output_tokens: r.output_tokens,
    model_calls: r.model_calls,
    tool_calls: r.tool_calls
  },
  created_at: toIso(r.created_at),
  started_at: isoOrNull(r.started_at),
  completed_at: isoOrNull(r.completed_at),
  start_deadline_at: toIso(r.start_deadline_at),
  execution_deadline_at: isoOrNull(r.execution_deadline_at),
  authorization_expires_at: toIso(r.authorization_expires_at),
  last_event_id: r.last_event_id
})

export const toEvent = (r: EventRow): RunEvent => ({
  id: r.id,
  object: "run.event",
  run_id: r.run_id,
  sequence: r.sequence,
  type: r.type,
  created_at: toIso(r.created_at),
  data: r.data
})
