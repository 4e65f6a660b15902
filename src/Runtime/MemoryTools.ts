/**
 * The built-in memory tools of a run (D14): `memory_get` and `memory_put`, offered when the run's
 * revision has `memory: true`. They run as reads (no approval) through the same steps as a customer
 * read: the key is checked again, `run.tool_call.started`, then `run.tool_call.completed` or
 * `run.tool_call.failed` with a `tool_call` usage record (its `tool_id` the built-in's name). Bad
 * input (a key outside the pattern, a value over 64 KiB) and a value past the cell's `storage_bytes`
 * quota (D20: `quota_exceeded`, nothing written) are tool errors the model reads, not a failed run. `memory_put`'s write is committed in the same transaction as its answer
 * (src/Memory.ts `toolCall`): a crash cannot lose the event of a write or write twice.
 */
import { Effect } from "effect"

import type { MemoryToolName } from "../Domain/Memory.js"
import { Trigger } from "../Domain/RunState.js"
import { traced } from "../Kernel/Spans.js"
import { Memory, type ToolAnswer } from "../Memory.js"
import type { Commit, UsageRecordInput } from "../Runs.js"
import type { Next, ProposedCall, ToolCallEnv } from "./ToolCallEnv.js"

export const resolveMemoryTool = (env: ToolCallEnv, call: ProposedCall & { readonly name: MemoryToolName }) =>
  Effect.gen(function*() {
    const memory = yield* Memory
    const { row } = env
    const callData = { tool_call_id: call.call_id, name: call.name, tool_id: call.name }
    const usage: ReadonlyArray<UsageRecordInput> = [{ kind: "tool_call", tool_id: call.name, input_tokens: 0, output_tokens: 0 }]
    const ending = yield* env.unauthorized
    if (ending !== undefined) {
      yield* env.commit({ trigger: ending })
      return "stop" as Next
    }
    const started = yield* env.commit({
      trigger: Trigger.ToolCallStarted(),
      data: { ...callData, effect: "read", input: call.input }
    })
    if (!started) return "stop" as Next
    const answerOf = (answer: ToolAnswer): Commit => {
      const [trigger, data, output] = answer.ok
        ? [Trigger.ToolCallCompleted(), { output: answer.output }, answer.output]
        : [Trigger.ToolCallFailed(), { error: answer.error }, { error: answer.error }]
      return {
        trigger,
        data: { ...callData, ...data },
        items: [{ type: "tool_result", call_id: call.call_id, name: call.name, output, is_error: !answer.ok }],
        usage
      }
    }
    const answered = yield* memory.toolCall(
      {
        cell: { tenantId: row.tenant_id, environment: row.environment },
        workspaceId: row.workspace_id,
        runId: row.id,
        storageLimit: yield* env.storageLimit
      },
      call.name,
      call.input,
      (answer) => env.commit(answerOf(answer))
    ).pipe(
      traced("tool.call", {
        attributes: { "tool.name": call.name, "tool.builtin": true, "run.id": row.id, "tool_call.id": call.call_id }
      })
    )
    return (answered ? "continue" : "stop") as Next
  })
