/**
 * What a model step commits, shaped purely from the step's result (the run actor's `commitStep`
 * commits it): a final answer is the assistant's message and the run's success with its output; a
 * tool-call answer is the assistant's message with the proposed calls (the actor resolves them
 * before its next model call); an answer over MAX_RUN_TEXT ends the run (D19). Each carries the
 * model call's usage record, and the conversation items the next step sees.
 */
import type { StepResult } from "../Domain/Conversation.js"
import { MAX_RUN_TEXT } from "../Domain/Runs.js"
import { Trigger } from "../Domain/RunState.js"
import type { Commit } from "./RunStore.js"

/** The model a step called (its usage record names it). */
export interface StepModel {
  readonly model_profile_id: string
  readonly provider: string
  readonly model: string
}

export interface StepCommits {
  /** The step's commits, in order (one transaction). */
  readonly commits: ReadonlyArray<Commit>
  /** Whether the answer's files (D13) are committed before them: not with an answer refused whole. */
  readonly withFiles: boolean
  /** Whether the run is over once they are committed. */
  readonly ends: boolean
}

export const stepCommits = (model: StepModel, result: StepResult): StepCommits => {
  const usage = [{
    kind: "model_call" as const,
    model_profile_id: model.model_profile_id,
    provider: model.provider,
    model: model.model,
    input_tokens: result.usage.input_tokens,
    output_tokens: result.usage.output_tokens
  }]
  const providerRequestId = result.provider_request_id === undefined ? {} : { provider_request_id: result.provider_request_id }
  const text = result.text ?? ""
  if (text.length > MAX_RUN_TEXT) {
    // D19: an answer over the limit ends the run; its usage is still recorded, its text is not kept.
    return {
      commits: [{
        trigger: Trigger.Fail({ reason: "output_too_large" }),
        data: {
          error: {
            type: "output_too_large",
            message: `The model answered ${text.length} characters; a run's output holds at most ${MAX_RUN_TEXT}`
          },
          ...providerRequestId
        },
        usage
      }],
      withFiles: false,
      ends: true
    }
  }
  const tokens = { input_tokens: result.usage.input_tokens, output_tokens: result.usage.output_tokens }
  if (result._tag === "Final") {
    const content = [{ type: "text" as const, text: result.text }]
    return {
      commits: [
        {
          trigger: Trigger.Message(),
          data: { role: "assistant", content, usage: tokens, ...providerRequestId },
          items: [{ type: "assistant_message", text: result.text }],
          usage
        },
        { trigger: Trigger.Succeed(), data: { output: content }, output: content }
      ],
      withFiles: true,
      ends: true
    }
  }
  // Proposed tool calls: recorded with the step; the actor resolves them before the next model call.
  const said = text === "" ? [] : [{ type: "text", text }]
  return {
    commits: [{
      trigger: Trigger.Message(),
      data: {
        role: "assistant",
        content: said,
        tool_calls: result.calls.map((c) => ({ tool_call_id: c.call_id, name: c.name, input: c.input })),
        usage: tokens,
        ...providerRequestId
      },
      items: [
        ...(text === "" ? [] : [{ type: "assistant_message", text }]),
        ...result.calls.map((c) => ({ type: "tool_call", call_id: c.call_id, name: c.name, input: c.input }))
      ],
      usage
    }],
    withFiles: true,
    ends: false
  }
}
