/** What a model step commits, shaped purely (src/Runs/StepCommits.ts): no database, no actor. */
import { describe, expect, it } from "@effect/vitest"

import { MAX_RUN_TEXT } from "../src/Domain/Runs.js"
import { Trigger } from "../src/Domain/RunState.js"
import { stepCommits } from "../src/Runs/StepCommits.js"

const model = { model_profile_id: "mp_1", provider: "sandbox", model: "scripted" }
const usage = { input_tokens: 7, output_tokens: 3, model_calls: 1 }
const record = { kind: "model_call", ...model, input_tokens: 7, output_tokens: 3 }

describe("a step's commits", () => {
  it("a final answer: the assistant's message with its item and usage record, then the run's success with its output", () => {
    const step = stepCommits(model, { _tag: "Final", text: "hello", usage, provider_request_id: "req_1" })
    const content = [{ type: "text", text: "hello" }]
    expect(step).toEqual({
      commits: [
        {
          trigger: Trigger.Message(),
          data: { role: "assistant", content, usage: { input_tokens: 7, output_tokens: 3 }, provider_request_id: "req_1" },
          items: [{ type: "assistant_message", text: "hello" }],
          usage: [record]
        },
        { trigger: Trigger.Succeed(), data: { output: content }, output: content }
      ],
      withFiles: true,
      ends: true
    })
  })

  it("proposed tool calls: one message with the calls and any text, as items the next step sees; the run goes on", () => {
    const step = stepCommits(model, {
      _tag: "ToolCalls",
      text: "looking",
      calls: [{ call_id: "call_1", name: "lookup", input: { q: 1 } }],
      usage
    })
    expect(step).toEqual({
      commits: [{
        trigger: Trigger.Message(),
        data: {
          role: "assistant",
          content: [{ type: "text", text: "looking" }],
          tool_calls: [{ tool_call_id: "call_1", name: "lookup", input: { q: 1 } }],
          usage: { input_tokens: 7, output_tokens: 3 }
        },
        items: [
          { type: "assistant_message", text: "looking" },
          { type: "tool_call", call_id: "call_1", name: "lookup", input: { q: 1 } }
        ],
        usage: [record]
      }],
      withFiles: true,
      ends: false
    })
    // without text: no text content and no assistant message item
    const silent = stepCommits(model, { _tag: "ToolCalls", calls: [{ call_id: "call_2", name: "lookup", input: {} }], usage })
    expect(silent.commits[0]!.data!.content).toEqual([])
    expect(silent.commits[0]!.items).toEqual([{ type: "tool_call", call_id: "call_2", name: "lookup", input: {} }])
  })

  it("an answer over MAX_RUN_TEXT ends the run output_too_large: its usage recorded, its text and files not kept (D19)", () => {
    const step = stepCommits(model, { _tag: "Final", text: "x".repeat(MAX_RUN_TEXT + 1), usage })
    expect(step).toEqual({
      commits: [{
        trigger: Trigger.Fail({ reason: "output_too_large" }),
        data: {
          error: {
            type: "output_too_large",
            message: `The model answered ${MAX_RUN_TEXT + 1} characters; a run's output holds at most ${MAX_RUN_TEXT}`
          }
        },
        usage: [record]
      }],
      withFiles: false,
      ends: true
    })
  })
})
