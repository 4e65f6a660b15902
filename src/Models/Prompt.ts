/** The conversation as an @effect/ai prompt, and a revision's tools as an @effect/ai toolkit. */
import * as Prompt from "@effect/ai/Prompt"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { Effect, Schema } from "effect"

import type { ConversationItem, ToolDefinition } from "../Domain/Conversation.js"

/**
 * The conversation as an @effect/ai prompt, the instructions as its system message. Built from
 * `Prompt.makeMessage`/`makePart` (no decoding, so it cannot throw). Consecutive assistant items
 * (text and proposed calls) form one assistant message and consecutive tool results one tool
 * message, the way providers produced and expect them (parallel calls, then their results).
 */
export const toPrompt = (instructions: string, items: ReadonlyArray<ConversationItem>): Prompt.Prompt => {
  const messages: Array<Prompt.Message> = []
  if (instructions.trim() !== "") messages.push(Prompt.makeMessage("system", { content: instructions }))
  let assistant: Array<Prompt.AssistantMessagePart> | undefined
  let tool: Array<Prompt.ToolMessagePart> | undefined
  const flush = () => {
    if (assistant) messages.push(Prompt.makeMessage("assistant", { content: assistant }))
    if (tool) messages.push(Prompt.makeMessage("tool", { content: tool }))
    assistant = undefined
    tool = undefined
  }
  for (const item of items) {
    switch (item.type) {
      case "user_message":
        flush()
        messages.push(Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: item.text })] }))
        break
      case "assistant_message":
      case "tool_call": {
        if (tool) flush()
        assistant ??= []
        assistant.push(
          item.type === "assistant_message"
            ? Prompt.makePart("text", { text: item.text })
            : Prompt.makePart("tool-call", { id: item.call_id, name: item.name, params: item.input, providerExecuted: false })
        )
        break
      }
      case "tool_result":
        if (assistant) {
          messages.push(Prompt.makeMessage("assistant", { content: assistant }))
          assistant = undefined
        }
        tool ??= []
        tool.push(
          Prompt.makePart("tool-result", {
            id: item.call_id,
            name: item.name,
            result: item.output,
            isFailure: item.is_error,
            providerExecuted: false
          })
        )
        break
    }
  }
  flush()
  return Prompt.fromMessages(messages)
}

/** Any JSON object: what a tool call's input is decoded with (the customer's schema is checked where the tool runs). */
const AnyObject = Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown }))

/**
 * A tool whose parameters decode permissively (any JSON object) while the JSON Schema sent to the
 * provider is exactly the customer's (the `jsonSchema` annotation replaces the generated one).
 */
export const toolOf = (definition: ToolDefinition) =>
  Tool.make(definition.name, {
    ...(definition.description === undefined ? {} : { description: definition.description }),
    success: Schema.Unknown
  }).setParameters(AnyObject.annotations({ jsonSchema: definition.input_schema }))

/**
 * The tools as an @effect/ai toolkit with its handlers. The library wants handlers even though
 * calls are returned unexecuted (`disableToolCallResolution`); these never run.
 */
export const toolkitOf = (tools: ReadonlyArray<ToolDefinition>) => {
  const toolkit = Toolkit.make(...tools.map(toolOf))
  const handlers = Object.fromEntries(
    tools.map((t) => [t.name, () => Effect.dieMessage("tool calls are returned to the run, not executed by the step engine")])
  )
  return Effect.provide(toolkit, toolkit.toLayer(handlers))
}
