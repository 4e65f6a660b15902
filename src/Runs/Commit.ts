/**
 * What a run commit writes, planned purely from the locked run and the commits: the state
 * machine's transitions in order (one refusal refuses all), the events with their sequences and
 * data, the run's new fields (status, reason, stamps, deadlines, output, required action, usage
 * counters), the conversation items and the usage records. Both run stores apply a plan; neither
 * decides anything itself.
 */
import { Either } from "effect"

import type { TextContent } from "../Domain/Runs.js"
import * as RunState from "../Domain/RunState.js"
import type { Admission, Commit, RunConversation, RunRow, UsageRecordInput } from "./RunStore.js"

export interface PlannedEvent {
  readonly sequence: number
  readonly type: RunState.EventType
  readonly data: Record<string, unknown>
}

export interface Plan {
  readonly status: RunState.RunStatus
  readonly reason: string | null
  readonly lastSequence: number
  readonly startedAt: Date | null
  readonly completedAt: Date | null
  readonly executionDeadlineAt: Date | null
  /** undefined: unchanged */
  readonly output: ReadonlyArray<TextContent> | undefined
  /** undefined: unchanged; null: cleared */
  readonly requiredAction: Record<string, unknown> | null | undefined
  readonly events: ReadonlyArray<PlannedEvent>
  readonly items: ReadonlyArray<unknown>
  readonly usage: ReadonlyArray<UsageRecordInput>
  /** the counters' increments */
  readonly added: { readonly inputTokens: number; readonly outputTokens: number; readonly modelCalls: number; readonly toolCalls: number }
}

type Locked = Pick<
  RunRow,
  "status" | "status_reason" | "last_sequence" | "started_at" | "completed_at" | "execution_deadline_at"
>

/**
 * The run as a commit of `p` leaves it (the row the store wrote): the run actor goes on from it
 * without reading the run again.
 */
export const applied = (locked: Omit<RunRow, "last_event_id">, p: Plan, lastEventId: string | null): RunRow => ({
  ...locked,
  status: p.status,
  status_reason: p.reason,
  last_sequence: p.lastSequence,
  input_tokens: locked.input_tokens + p.added.inputTokens,
  output_tokens: locked.output_tokens + p.added.outputTokens,
  model_calls: locked.model_calls + p.added.modelCalls,
  tool_calls: locked.tool_calls + p.added.toolCalls,
  started_at: p.startedAt,
  completed_at: p.completedAt,
  execution_deadline_at: p.executionDeadlineAt,
  output: p.output === undefined ? locked.output : p.output,
  required_action: p.requiredAction === undefined ? locked.required_action : p.requiredAction,
  last_event_id: lastEventId
})

/** The run as its admission wrote it (the row `run` would read). */
export const admittedRow = (a: Admission, eventId: string, conversation: RunConversation): RunRow => ({
  id: a.id,
  tenant_id: a.tenant_id,
  environment: a.environment,
  workspace_id: conversation.workspace_id,
  conversation_id: a.conversation_id,
  agent_revision_id: conversation.agent_revision_id,
  key_id: a.key_id,
  user_id: a.user_id,
  status: "queued",
  status_reason: null,
  input: a.input.map((c) => (c.type === "text" ? { type: "text", text: c.text } : { type: "file", file_id: c.file_id })),
  output: null,
  required_action: null,
  input_tokens: 0,
  output_tokens: 0,
  model_calls: 0,
  tool_calls: 0,
  last_sequence: 1,
  created_at: a.created_at,
  started_at: null,
  completed_at: null,
  start_deadline_at: a.start_deadline_at,
  execution_deadline_at: null,
  authorization_expires_at: a.authorization_expires_at,
  last_event_id: eventId
})

export const plan = (
  locked: Locked,
  commits: ReadonlyArray<Commit<unknown>>,
  at: Date
): Either.Either<Plan, RunState.TransitionRefused> => {
  let status = locked.status
  let reason = locked.status_reason
  let sequence = locked.last_sequence
  let startedAt = locked.started_at
  let completedAt = locked.completed_at
  let executionDeadlineAt = locked.execution_deadline_at
  let output: ReadonlyArray<TextContent> | undefined
  let requiredAction: Record<string, unknown> | null | undefined
  const events: Array<PlannedEvent> = []
  const items: Array<unknown> = []
  const usage: Array<UsageRecordInput> = []
  for (const c of commits) {
    const next = RunState.transition(status, c.trigger)
    if (Either.isLeft(next)) return Either.left(next.left)
    const t = next.right
    sequence++
    events.push({
      sequence,
      type: t.event,
      data: t.changed ? { status: t.status, status_reason: t.reason, ...c.data } : { ...c.data }
    })
    if (t.changed) reason = t.reason
    for (const stamp of t.stamps) {
      if (stamp === "started_at") startedAt = at
      else completedAt = at
    }
    status = t.status
    if (c.executionSeconds !== undefined) executionDeadlineAt = new Date(at.getTime() + c.executionSeconds * 1000)
    if (c.executionDeadlineAt !== undefined) executionDeadlineAt = c.executionDeadlineAt
    if (c.output !== undefined) output = c.output
    if (c.requiredAction !== undefined) requiredAction = c.requiredAction
    for (const u of c.usage ?? []) usage.push(u)
    for (const item of c.items ?? []) items.push(item)
  }
  const sum = (f: (u: UsageRecordInput) => number) => usage.reduce((n, u) => n + f(u), 0)
  return Either.right({
    status,
    reason,
    lastSequence: sequence,
    startedAt,
    completedAt,
    executionDeadlineAt,
    output,
    requiredAction,
    events,
    items,
    usage,
    added: {
      inputTokens: sum((u) => u.input_tokens),
      outputTokens: sum((u) => u.output_tokens),
      modelCalls: sum((u) => (u.kind === "model_call" ? 1 : 0)),
      toolCalls: sum((u) => (u.kind === "tool_call" ? 1 : 0))
    }
  })
}
