/**
 * The run store in memory: the same contract as the Postgres store (src/Runs/RunStore.ts), for
 * unit tests of the run actor that run in milliseconds on TestClock. Commits are serialised by a
 * one-permit semaphore (the row lock's stand-in) and planned by the same pure `plan`; a commit's
 * `also` writes run before anything is applied, so a failing one leaves the run as it was. Quotas
 * are counted from what it holds, under the same lock. There are no cell generations here: a
 * commit's fence is not checked.
 */
import { Clock, Effect, Either, Layer, Option } from "effect"

import { exhausted, type QuotaLimits, type QuotaUsed, RUN_QUOTAS, utcDay } from "../Domain/Quotas.js"
import * as RunState from "../Domain/RunState.js"
import { makeId } from "../Kernel/Ids.js"
import { admittedRow, applied, plan } from "./Commit.js"
import {
  type Admission,
  type Commit,
  type ConversationRow,
  type EventRow,
  type RunRow,
  RunStore,
  type RunStoreShape,
  type UsageRecordInput
} from "./RunStore.js"

export interface MemoryRunStore extends RunStoreShape {
  /** Usage records written so far, in order (with the run they belong to). */
  readonly usageRecords: Effect.Effect<ReadonlyArray<UsageRecordInput & { readonly run_id: string }>>
}

export const make: Effect.Effect<MemoryRunStore> = Effect.gen(function*() {
  const lock = yield* Effect.makeSemaphore(1)
  const conversations = new Map<string, ConversationRow>()
  const runs = new Map<string, RunRow>()
  const events = new Map<string, Array<EventRow>>()
  const positions = new Map<string, { run_id: string; sequence: number }>()
  const items = new Map<string, Array<unknown>>()
  const usage: Array<UsageRecordInput & { run_id: string }> = []
  const tokensByDay = new Map<string, number>()
  const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

  const addEvent = (row: EventRow) => {
    const list = events.get(row.run_id) ?? []
    list.push(row)
    events.set(row.run_id, list)
    positions.set(row.id, { run_id: row.run_id, sequence: row.sequence })
  }
  const addItems = (conversationId: string, added: ReadonlyArray<unknown>) => {
    const list = items.get(conversationId) ?? []
    list.push(...added)
    items.set(conversationId, list)
  }

  /** The cell's quota counters, counted from what the store holds (tokens by the day of their commit). */
  const usedBy = (a: Admission): QuotaUsed => {
    const day = utcDay(a.created_at)
    const mine = [...runs.values()].filter((r) => r.tenant_id === a.tenant_id && r.environment === a.environment)
    return {
      runs_per_day: mine.filter((r) => utcDay(r.created_at) === day).length,
      concurrent_runs: mine.filter((r) => !RunState.isTerminal(r.status)).length,
      tokens_per_day: tokensByDay.get(`${a.tenant_id}/${a.environment}/${day}`) ?? 0,
      storage_bytes: 0,
      webhook_endpoints: 0,
      schedules: 0
    }
  }

  const admit = (a: Admission, limits: QuotaLimits) =>
    lock.withPermits(1)(Effect.gen(function*() {
      const found = conversations.get(a.conversation_id)
      if (
        found === undefined || found.tenant_id !== a.tenant_id || found.environment !== a.environment ||
        (a.workspace !== undefined && found.workspace_id !== a.workspace)
      ) return { _tag: "ConversationNotFound" } as const
      const conversation = { workspace_id: found.workspace_id, agent_revision_id: found.agent_revision_id }
      const busy = [...runs.values()].some((r) => r.conversation_id === a.conversation_id && !RunState.isTerminal(r.status))
      if (busy) return { _tag: "ConversationBusy" } as const
      const over = exhausted(RUN_QUOTAS, limits, usedBy(a))
      if (over !== undefined) return { _tag: "OverQuota", quota: over } as const
      const eventId = yield* makeId("evt")
      runs.set(a.id, admittedRow(a, eventId, conversation))
      addEvent({ id: eventId, run_id: a.id, sequence: 1, type: "run.queued", data: { status: "queued" }, created_at: a.created_at })
      addItems(a.conversation_id, [a.item])
      return { _tag: "Admitted", eventId, conversation } as const
    }))

  const commitAll = <E = never>(runId: string, commits: ReadonlyArray<Commit<E>>) =>
    lock.withPermits(1)(Effect.gen(function*() {
      const locked = runs.get(runId)
      if (!locked) return Either.left(new RunState.TransitionRefused({ status: "queued", trigger: commits[0]!.trigger._tag }))
      const at = yield* now
      const planned = plan(locked, commits, at)
      if (Either.isLeft(planned)) return Either.left(planned.left)
      const p = planned.right
      for (const c of commits) if (c.also !== undefined) yield* c.also
      const written: Array<EventRow> = []
      for (const e of p.events) {
        const row: EventRow = { id: yield* makeId("evt"), run_id: runId, sequence: e.sequence, type: e.type, data: e.data, created_at: at }
        addEvent(row)
        written.push(row)
      }
      const row = applied(locked, p, written.at(-1)?.id ?? locked.last_event_id)
      runs.set(runId, row)
      addItems(locked.conversation_id, p.items)
      for (const u of p.usage) usage.push({ ...u, run_id: runId })
      const tokensKey = `${locked.tenant_id}/${locked.environment}/${utcDay(at)}`
      tokensByDay.set(tokensKey, (tokensByDay.get(tokensKey) ?? 0) + p.added.inputTokens + p.added.outputTokens)
      return Either.right({ status: p.status, events: written as ReadonlyArray<EventRow>, row })
    }))

  const run = (id: string) => Effect.sync(() => Option.fromNullable(runs.get(id)))

  return {
    conversation: (tenantId, environment, id) =>
      Effect.sync(() =>
        Option.filter(Option.fromNullable(conversations.get(id)), (c) => c.tenant_id === tenantId && c.environment === environment)
      ),
    insertConversation: (row) =>
      Effect.map(now, (at) => {
        const inserted: ConversationRow = {
          id: row.id,
          tenant_id: row.tenant_id,
          environment: row.environment,
          workspace_id: row.workspace_id,
          agent_revision_id: row.agent_revision_id,
          created_at: at
        }
        conversations.set(row.id, inserted)
        return inserted
      }),
    run,
    starting: run,
    // (admissions here read nothing ahead for the first dispatch)
    takeFirstRead: () => undefined,
    ended: run,
    runOfCell: (tenantId, environment, id) =>
      Effect.map(run(id), Option.filter((r) => r.tenant_id === tenantId && r.environment === environment)),
    admit,
    commitAll,
    items: (conversationId, budgetBytes) =>
      Effect.sync(() => {
        const all = items.get(conversationId) ?? []
        const lastUser = all.findLastIndex((i) => (i as { type?: unknown })?.type === "user_message")
        let bytes = 0
        let from = all.length
        while (from > 0 && (bytes += JSON.stringify(all[from - 1]).length) <= budgetBytes) from--
        return all.slice(Math.max(0, Math.min(from, lastUser < 0 ? from : lastUser)))
      }),
    eventPosition: (eventId) => Effect.sync(() => Option.fromNullable(positions.get(eventId))),
    eventsAfter: (runId, afterSequence, limit) =>
      Effect.sync(() => (events.get(runId) ?? []).filter((e) => e.sequence > afterSequence).slice(0, limit)),
    openRunsOf: (tenantId, environment) =>
      Effect.sync(() =>
        [...runs.values()]
          .filter((r) => r.tenant_id === tenantId && r.environment === environment && !RunState.isTerminal(r.status))
          .map((r) => r.id)
          .sort()
      ),
    openRuns: Effect.sync(() =>
      [...runs.values()]
        .filter((r) => !RunState.isTerminal(r.status))
        .sort((a, b) => (a.id < b.id ? -1 : 1))
        .map((r) => ({ id: r.id, tenant_id: r.tenant_id, environment: r.environment }))
    ),
    usageRecords: Effect.sync(() => [...usage])
  }
})

/** An empty run store in memory. */
export const RunStoreMemory: Layer.Layer<RunStore> = Layer.effect(RunStore, make)
