/**
 * Later reconciliation (contract 3.1 rule 3, 4.1.3): writes left `unknown` (their runs ended
 * `outcome_unknown`) are asked about again through their reconciliation path every
 * RECONCILE_RETRY_SECONDS. A definitive answer (`succeeded`, `failed`, `not_found`) settles the
 * operation and adds a `run.reconciled` receipt to the run; its status and its historic events
 * stay as they were. Nothing is ever replayed.
 */
import { Clock, Duration, Effect, Either, Layer, Schedule } from "effect"

import { Cells } from "../Cells/Cells.js"
import { GetGeneration } from "../Cells/Protocol.js"
import { AppConfig } from "../Config/AppConfig.js"
import { Trigger } from "../Domain/RunState.js"
import { traced } from "../Kernel/Spans.js"
import { RunStore } from "../Runs.js"
import { Invoker, OperationsRepo, reconciliationUrl, Tools } from "../Tools.js"
import { actorOf, deliveriesEndBy, reconcileOnce } from "./ToolCalls.js"

export const reconcileDue = Effect.gen(function*() {
  const operations = yield* OperationsRepo
  const runs = yield* RunStore
  const tools = yield* Tools
  const invoker = yield* Invoker
  const cells = yield* Cells
  const config = yield* AppConfig
  const now = yield* Clock.currentTimeMillis
  const due = yield* operations.dueForReconciliation(new Date(now), 50)
  for (const op of due) {
    const run = yield* runs.run(op.run_id)
    const [tool] = yield* tools.toolRows([op.tool_id])
    if (run._tag === "None" || tool === undefined || tool.reconciliation_path === null) continue
    const cell = { tenantId: op.tenant_id, environment: op.environment }
    const answer = yield* reconcileOnce(
      invoker,
      reconciliationUrl(tool.base_url, tool.reconciliation_path, op.id),
      {
        cell,
        actor: actorOf(run.value),
        operationId: op.id,
        cellGeneration: yield* cells.send(cell, new GetGeneration()),
        runId: op.run_id,
        toolId: op.tool_id
      },
      op.id,
      deliveriesEndBy(config, op.created_at)
    )
    const at = new Date(yield* Clock.currentTimeMillis)
    if (answer._tag !== "Settled") {
      const backoff = Math.min(config.tools.reconcileRetrySeconds * 2 ** Math.min(op.attempts, 6), 6 * 3600)
      yield* operations.transition(op.id, { _tag: "Postpone" }, at, { nextReconcileAt: new Date(at.getTime() + backoff * 1000) })
      continue
    }
    const receipt = yield* runs.commitAll(op.run_id, [{
      trigger: Trigger.Reconcile(),
      data: {
        operation_id: op.id,
        tool_call_id: op.tool_call_id,
        tool_id: op.tool_id,
        status: answer.status,
        ...(answer.output === undefined ? {} : { output: answer.output })
      },
      also: operations.transition(
        op.id,
        { _tag: "Settle", outcome: answer.status },
        at,
        answer.status === "succeeded" ? { output: answer.output } : {}
      )
    }])
    if (Either.isLeft(receipt)) yield* Effect.logWarning("reconciliation receipt refused", { operation_id: op.id })
  }
  return due.length
}).pipe(traced("Reconciler.reconcileDue"))

/** The background loop (one per process; every replica may run it: settling is idempotent). */
export const ReconcilerLive = Layer.scopedDiscard(
  Effect.flatMap(AppConfig, (config) =>
    reconcileDue.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("reconciliation pass failed", cause)),
      Effect.repeat(Schedule.spaced(Duration.seconds(config.tools.reconcileRetrySeconds))),
      Effect.forkScoped
    ))
)
