/**
 * How a run actor resolves the tool calls a model proposed (contract 3.1, 4.1; D7, D9, D10).
 *
 * The conversation items are the record: a `tool_call` item without its `tool_result` is a call
 * still to resolve, so an actor restarted at any point continues where the database says.
 *
 * - A read is validated against its input schema, called (signed), its output validated, and the
 *   result (or the error) goes back to the agent.
 * - A write first needs a human: an approval is created with the run's `requires_action` commit,
 *   and the actor stops (nothing is held while a human decides; the cell's alarm or the decision
 *   revives it). Once approved, revocation is checked again, the operation id is committed, and
 *   the write is called exactly once, uninterruptibly (a cancel does not undo an accepted write).
 *   An ambiguous outcome is never replayed: the reconciliation path is asked; `pending` is asked
 *   again within the budget; no answer -> the run ends `outcome_unknown` and a background
 *   reconciliation adds a `run.reconciled` receipt later.
 *
 * Each invocation is a `tool.call` span (tool, connection, run, operation and its outcome), each
 * reconciliation call a `tool.reconcile` span; neither carries the input or the output.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect } from "effect"

import { ApprovalsRepo } from "../Approvals.js"
import { AppConfig } from "../Config/AppConfig.js"
import type { ConversationItem } from "../Domain/Conversation.js"
import { isMemoryTool } from "../Domain/Memory.js"
import { Trigger } from "../Domain/RunState.js"
import { makeId } from "../Kernel/Ids.js"
import { annotateSpan, traced } from "../Kernel/Spans.js"
import type { Commit, RunRow, UsageRecordInput } from "../Runs.js"
import { type CallContext, CallOutcome, Invoker, joinUrl, OperationsRepo, reconciliationUrl, type ToolRow, validate } from "../Tools.js"
import { resolveMemoryTool } from "./MemoryTools.js"
import type { Next, ProposedCall, ToolCallEnv } from "./ToolCallEnv.js"

export type { Next, ProposedCall, ToolCallEnv } from "./ToolCallEnv.js"

/** Tool calls proposed but not yet answered, in order. */
export const unresolved = (items: ReadonlyArray<ConversationItem>): ReadonlyArray<ProposedCall> => {
  const answered = new Set(items.flatMap((i) => (i.type === "tool_result" ? [i.call_id] : [])))
  return items.filter((i): i is ProposedCall => i.type === "tool_call" && !answered.has(i.call_id))
}

const result = (call: ProposedCall, output: unknown, isError: boolean) => ({
  type: "tool_result" as const,
  call_id: call.call_id,
  name: call.name,
  output,
  is_error: isError
})

const toolUsage = (tool: ToolRow): UsageRecordInput => ({
  kind: "tool_call",
  tool_id: tool.id,
  input_tokens: 0,
  output_tokens: 0
})

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

const OUTCOMES = { Ok: "ok", Rejected: "rejected", NotSent: "not_sent", Ambiguous: "ambiguous" } as const

/** A call's outcome on its span (the HTTP status when the tool answered); never its input or output. */
const annotateOutcome = (outcome: CallOutcome) =>
  annotateSpan({
    "tool.outcome": OUTCOMES[outcome._tag],
    ...("status" in outcome ? { "http.response.status_code": outcome.status } : {})
  })

/** Who a run's tool calls act for (the token's `actor`): its user, else the key that created it. */
export const actorOf = (run: Pick<RunRow, "user_id" | "key_id">) =>
  run.user_id === null ? { type: "api_key", id: run.key_id } : { type: "user", id: run.user_id }

export const resolve = (env: ToolCallEnv, call: ProposedCall) =>
  Effect.gen(function*() {
    if (env.memory && isMemoryTool(call.name)) return yield* resolveMemoryTool(env, { ...call, name: call.name })
    const invoker = yield* Invoker
    const operations = yield* OperationsRepo
    const approvals = yield* ApprovalsRepo
    const config = yield* AppConfig
    const { row } = env
    const tool = env.tools.find((t) => t.name === call.name)
    const callData = { tool_call_id: call.call_id, name: call.name }

    const fail = (error: { type: string; message: string }, extra: Partial<Commit> = {}) =>
      Effect.as(
        env.commit({
          trigger: Trigger.ToolCallFailed(),
          data: { ...callData, ...(tool ? { tool_id: tool.id } : {}), error },
          items: [result(call, { error }, true)],
          ...extra
        }),
        "continue" as Next
      )

    if (tool === undefined) {
      return yield* fail({ type: "unknown_tool", message: `The agent has no tool named "${call.name}"` })
    }
    const inputProblem = yield* validate(`${tool.id}:input`, tool.input_schema, call.input)
    if (inputProblem !== undefined) {
      return yield* fail({ type: "invalid_input", message: `The input does not match the tool's input schema: ${inputProblem}` })
    }
    const url = joinUrl(tool.base_url, tool.path)
    const body = JSON.stringify(call.input)
    const context = (operationId: string, issuedAt?: Date): CallContext => ({
      cell: { tenantId: row.tenant_id, environment: row.environment },
      actor: actorOf(row),
      operationId,
      cellGeneration: env.cellGeneration,
      runId: row.id,
      toolId: tool.id,
      ...(issuedAt === undefined ? {} : { issuedAt })
    })
    /** The invocation of the customer's tool: a `tool.call` span with its outcome. */
    const dispatch = (operationId: string, issuedAt?: Date) =>
      invoker.invoke(url, body, context(operationId, issuedAt)).pipe(
        Effect.tap(annotateOutcome),
        traced("tool.call", {
          attributes: {
            "tool.name": tool.name,
            "tool.id": tool.id,
            "tool.effect": tool.effect,
            "connection.id": tool.connection_id,
            "run.id": row.id,
            "tool_call.id": call.call_id,
            "operation.id": operationId
          }
        })
      )

    /** The tool's answer to the agent (output validated), or a tool error; with the usage record. */
    const settle = (outcome: CallOutcome, also?: (ok: boolean, output: unknown, error?: unknown) => Effect.Effect<unknown, SqlError>) => {
      if (outcome._tag === "Ok") {
        return Effect.flatMap(validate(`${tool.id}:output`, tool.output_schema, outcome.body), (problem) => {
          if (problem === undefined) {
            return Effect.as(
              env.commit({
                trigger: Trigger.ToolCallCompleted(),
                data: { ...callData, tool_id: tool.id, output: outcome.body },
                items: [result(call, outcome.body, false)],
                usage: [toolUsage(tool)],
                ...(also ? { also: also(true, outcome.body) } : {})
              }),
              "continue" as Next
            )
          }
          const error = { type: "invalid_output", message: `The tool's answer does not match its output schema: ${problem}` }
          return fail(error, { usage: [toolUsage(tool)], ...(also ? { also: also(true, outcome.body, error) } : {}) })
        })
      }
      const error = outcome._tag === "Rejected"
        ? {
          type: "tool_error",
          message: outcome.message,
          status: outcome.status,
          ...(outcome.body === undefined ? {} : { body: outcome.body })
        }
        : { type: outcome._tag === "NotSent" ? "tool_unreachable" : "tool_error", message: outcome.message }
      return fail(error, { usage: [toolUsage(tool)], ...(also ? { also: also(false, undefined, error) } : {}) })
    }

    // ---- reads ---------------------------------------------------------------------------
    if (tool.effect === "read") {
      const ending = yield* env.unauthorized
      if (ending !== undefined) {
        yield* env.commit({ trigger: ending })
        return "stop" as Next
      }
      const started = yield* env.commit({
        trigger: Trigger.ToolCallStarted(),
        data: { ...callData, tool_id: tool.id, effect: "read", input: call.input }
      })
      if (!started) return "stop" as Next
      const outcome = yield* dispatch(yield* makeId("op"))
      return yield* settle(outcome)
    }

    // ---- writes: an approval first -------------------------------------------------------
    const approval = yield* approvals.approvalFor(row.id, call.call_id)
    if (approval === undefined) {
      const at = yield* now
      const expires = new Date(Math.min(
        at.getTime() + config.runs.approvalSeconds * 1000,
        row.authorization_expires_at.getTime()
      ))
      const approvalId = yield* makeId("apr")
      const details = {
        approval_id: approvalId,
        tool_call_id: call.call_id,
        operation: { tool_id: tool.id, connection_id: tool.connection_id, name: tool.name, effect: "write" as const },
        input: call.input,
        destination_url: url,
        agent_revision_id: row.agent_revision_id,
        expires_at: expires.toISOString()
      }
      const waiting = yield* env.commit({
        trigger: Trigger.RequireAction(),
        data: { required_action: { type: "approval", ...details } },
        requiredAction: { type: "approval", ...details },
        also: approvals.insertApproval({
          id: approvalId,
          tenant_id: row.tenant_id,
          environment: row.environment,
          run_id: row.id,
          tool_call_id: call.call_id,
          tool_id: tool.id,
          operation: details.operation,
          input: call.input,
          destination_url: url,
          agent_revision_id: row.agent_revision_id,
          created_at: at,
          expires_at: expires
        })
      })
      if (waiting) yield* env.wakeAt(expires)
      return "stop" as Next
    }
    if (approval.status !== "approved") {
      // pending: woken early (the run is requires_action; the actor only keeps the alarm);
      // denied/expired answers were committed with the decision.
      if (approval.status === "pending") yield* env.wakeAt(approval.expires_at)
      return "stop" as Next
    }

    // ---- an approved write: exactly once ---------------------------------------------------
    let operation = yield* operations.operationFor(row.id, call.call_id)
    /** this actor's own delivery of the write was answered: no delivery of it is still under way */
    let deliveriesOver = false
    if (operation === undefined) {
      const ending = yield* env.unauthorized
      if (ending !== undefined) {
        yield* env.commit({ trigger: ending })
        return "stop" as Next
      }
      const operationId = yield* makeId("op")
      const at = yield* now
      const record = {
        id: operationId,
        tenant_id: row.tenant_id,
        environment: row.environment,
        run_id: row.id,
        tool_call_id: call.call_id,
        tool_id: tool.id
      }
      const dispatched = yield* env.commit({
        trigger: Trigger.ToolCallStarted(),
        data: { ...callData, tool_id: tool.id, effect: "write", input: call.input, operation_id: operationId, approval_id: approval.id },
        also: operations.insertOperation({ ...record, approval_id: approval.id, at })
      })
      if (!dispatched) return "stop" as Next
      // The call and the record of its answer are one uninterruptible step: a cancel (or a
      // budget) arriving meanwhile waits for it, and does not undo it. Its token lives from the
      // commit above (`at`), not from when it is signed (see InvocationClaims.issuedAt).
      const answered = yield* Effect.uninterruptible(Effect.gen(function*() {
        const outcome = yield* dispatch(operationId, at)
        if (outcome._tag === "Ambiguous") return outcome
        const settledAt = yield* now
        return yield* settle(outcome, (ok, output, error) =>
          operations.transition(operationId, { _tag: "Settle", outcome: ok ? "succeeded" : "failed" }, settledAt, { output, error }))
      }))
      if (typeof answered === "string") {
        return answered
      }
      const outcome = answered
      yield* Effect.logWarning("write outcome ambiguous; reconciling", { operation_id: operationId, message: outcome.message })
      deliveriesOver = outcome.answered
      operation = {
        ...record,
        status: "dispatched",
        output: null,
        attempts: 1,
        next_reconcile_at: null,
        created_at: at
      }
    }
    if (operation.status !== "dispatched") {
      return "continue" as Next // settled by a commit that also answered the call
    }

    // ---- an ambiguous (or interrupted) write: reconcile, never replay ---------------------------
    if (tool.reconciliation_path === null) {
      return yield* loseOutcome(env, operation, "no reconciliation path")
    }
    const reconcileUrl = reconciliationUrl(tool.base_url, tool.reconciliation_path, operation.id)
    // A delivery still under way (this actor's timed out; or a previous owner's, dispatched before
    // it stalled or died) may yet be applied: until its token expired, `not_found` is not final.
    const notFoundFinalAt = deliveriesOver ? 0 : deliveriesEndBy(config, operation.created_at)
    let failures = 0
    while (true) {
      const answer = yield* reconcileOnce(invoker, reconcileUrl, context(operation.id), operation.id, notFoundFinalAt)
      if (answer._tag === "Settled") {
        const settledAt = yield* now
        const opId = operation.id
        if (answer.status === "succeeded") {
          return yield* settle(CallOutcome.Ok({ status: 200, body: answer.output }), (_ok, output, error) =>
            operations.transition(opId, { _tag: "Settle", outcome: "succeeded" }, settledAt, { output, error }))
        }
        const error = {
          type: "write_not_applied",
          message: `Reconciliation says the write ${answer.status === "failed" ? "failed" : "was not found"}`
        }
        return yield* fail(error, {
          usage: [toolUsage(tool)],
          also: operations.transition(opId, { _tag: "Settle", outcome: answer.status }, settledAt, { error })
        })
      }
      if (answer._tag === "Unknown" && ++failures >= 3) {
        return yield* loseOutcome(env, operation, answer.message)
      }
      // pending (or a failed attempt): ask again, within the run's budget
      yield* Effect.sleep(Duration.seconds(config.tools.reconcilePollSeconds))
    }
  })

/**
 * When no delivery of a write dispatched at `dispatchedAt` can be accepted any more: its token
 * (`iat` = the dispatch's commit) expired, with the customer's clock tolerance and the nodes' skew.
 */
export const deliveriesEndBy = (
  config: { readonly tools: { readonly tokenSeconds: number; readonly clockToleranceSeconds: number } },
  dispatchedAt: Date
) => dispatchedAt.getTime() + (config.tools.tokenSeconds + config.tools.clockToleranceSeconds) * 1000

type Reconciled =
  | { readonly _tag: "Settled"; readonly status: "succeeded" | "failed" | "not_found"; readonly output: unknown }
  | { readonly _tag: "Pending" }
  | { readonly _tag: "Unknown"; readonly message: string }

/**
 * One signed call of the reconciliation path, read per contract 2.3. `not_found` before
 * `notFoundFinalAt` (epoch ms, deliveriesEndBy) is `Pending`: a delivery still under way may apply it.
 */
export const reconcileOnce = (
  invoker: Invoker,
  url: string,
  context: CallContext,
  operationId: string,
  notFoundFinalAt: number
): Effect.Effect<Reconciled> =>
  Effect.zipWith(invoker.reconcile(url, context).pipe(Effect.tap(annotateOutcome)), Clock.currentTimeMillis, (outcome, at): Reconciled => {
    if (outcome._tag !== "Ok") return { _tag: "Unknown", message: outcome.message }
    const body = outcome.body as { operation_id?: unknown; status?: unknown; output?: unknown }
    if (body?.operation_id !== operationId) return { _tag: "Unknown", message: "the reconciliation answer names another operation" }
    switch (body.status) {
      case "not_found":
        if (at < notFoundFinalAt) return { _tag: "Pending" }
        return { _tag: "Settled", status: body.status, output: body.output }
      case "succeeded":
      case "failed":
        return { _tag: "Settled", status: body.status, output: body.output }
      case "pending":
        return { _tag: "Pending" }
      default:
        return { _tag: "Unknown", message: `unknown reconciliation status ${JSON.stringify(body.status)}` }
    }
  }).pipe(
    Effect.tap((answer) => annotateSpan({ "tool.reconciled": answer._tag === "Settled" ? answer.status : answer._tag.toLowerCase() })),
    traced("tool.reconcile", {
      attributes: { "tool.id": context.toolId, "run.id": context.runId, "operation.id": operationId }
    })
  )

/** The write may have happened and nobody can say: the run ends `outcome_unknown`. */
/**
 * The run ends `outcome_unknown`: the write was sent, so its `tool_call` usage record (D16) is
 * written with this commit.
 */
export const loseOutcome = (
  env: Pick<ToolCallEnv, "commit">,
  operation: { readonly id: string; readonly tool_id: string },
  message: string
) =>
  Effect.gen(function*() {
    const operationId = operation.id
    const operations = yield* OperationsRepo
    const config = yield* AppConfig
    const at = yield* now
    yield* env.commit({
      trigger: Trigger.LoseOutcome({ reason: "write_outcome_unknown" }),
      data: { operation_id: operationId, message },
      usage: [{ kind: "tool_call", tool_id: operation.tool_id, input_tokens: 0, output_tokens: 0 }],
      also: operations.transition(operationId, { _tag: "LoseOutcome" }, at, {
        nextReconcileAt: new Date(at.getTime() + config.tools.reconcileRetrySeconds * 1000)
      })
    })
    return "stop" as Next
  })

/**
 * Ends a run that stops before its work is done (a budget ran out, a cancel completed). With a
 * write whose outcome is not known it ends `outcome_unknown`, never merely expired or cancelled
 * (contract 3.1 rule 2); otherwise with `ending`, a pending approval expiring with it.
 */
export const endUnfinished = (
  commit: ToolCallEnv["commit"],
  runId: string,
  ending: Trigger,
  unknownReason: string
) =>
  Effect.gen(function*() {
    const operations = yield* OperationsRepo
    const approvals = yield* ApprovalsRepo
    const open = yield* operations.unsettled(runId)
    if (open !== undefined) return yield* Effect.asVoid(loseOutcome({ commit }, open, unknownReason))
    yield* commit({ trigger: ending, also: approvals.transition({ runId }, { _tag: "Expire" }, yield* now) })
  })
