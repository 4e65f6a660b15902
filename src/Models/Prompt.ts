/** The conversation as an @effect/ai prompt, and a revision's tools as an @effect/ai toolkit. */
import * as Prompt from "@effect/ai/Prompt"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { Effect, Schema } from "effect"

import type { ConversationItem, ToolDefinition } from "../Domain/Conversation.js"

/**
 * Parts and messages exactly as `Prompt.makePart` and `Prompt.makeMessage` make them (a test holds
 * them equal), written as literals. Those two spread their parameters into a new object and then
 * add properties to it, for which Node 20's V8 initialises a map (hidden class) per object and
 * throws it away: about 3 µs per part or message, against 10 ns for a literal (issue 20; a window
 * of 21 items took 150 µs to turn into a prompt, 1 µs now).
 */
const P = Prompt.PartTypeId
const M = Prompt.MessageTypeId
const textPart = (text: string): Prompt.TextPart => ({ [P]: P, type: "text", text, options: {} })
const toolCallPart = (id: string, name: string, params: unknown): Prompt.ToolCallPart => ({
  [P]: P,
  type: "tool-call",
  id,
  name,
  params,
  providerExecuted: false,
  options: {}
})
const toolResultPart = (id: string, name: string, result: unknown, isFailure: boolean): Prompt.ToolResultPart => ({
  [P]: P,
  type: "tool-result",
  id,
  name,
  result,
  isFailure,
  providerExecuted: false,
  options: {}
})
const filePart = (mediaType: string, fileName: string, data: Uint8Array): Prompt.FilePart => ({
  [P]: P,
  type: "file",
  mediaType,
  fileName,
  data,
  options: {}
})
const systemMessage = (content: string): Prompt.SystemMessage => ({ [M]: M, role: "system", content, options: {} })
const userMessage = (content: Array<Prompt.UserMessagePart>): Prompt.UserMessage => ({
  [M]: M,
  role: "user",
  content,
  options: {}
})
const assistantMessage = (content: Array<Prompt.AssistantMessagePart>): Prompt.AssistantMessage => ({
  [M]: M,
  role: "assistant",
  content,
  options: {}
})
const toolMessage = (content: Array<Prompt.ToolMessagePart>): Prompt.ToolMessage => ({
  [M]: M,
  role: "tool",
  content,
  options: {}
})

/** The constructors above, for the test that holds them equal to the library's. */
export const literals = {
  textPart,
  toolCallPart,
  toolResultPart,
  filePart,
  systemMessage,
  userMessage,
  assistantMessage,
  toolMessage
} as const

/**
 * The conversation as an @effect/ai prompt, the instructions as its system message. Built from
 * the parts and messages above (no decoding, so it cannot throw). Consecutive assistant items
 * (text and proposed calls) form one assistant message and consecutive tool results one tool
 * message, the way providers produced and expect them (parallel calls, then their results).
 */
export const toPrompt = (
  instructions: string,
  items: ReadonlyArray<ConversationItem>,
  files: ReadonlyMap<string, Uint8Array> = new Map(),
  options: FileOptions = { binary: false }
): Prompt.Prompt => {
  const messages: Array<Prompt.Message> = []
  if (instructions.trim() !== "") messages.push(systemMessage(instructions))
  let assistant: Array<Prompt.AssistantMessagePart> | undefined
  let tool: Array<Prompt.ToolMessagePart> | undefined
  const flush = () => {
    if (assistant) messages.push(assistantMessage(assistant))
    if (tool) messages.push(toolMessage(tool))
    assistant = undefined
    tool = undefined
  }
  for (const item of items) {
    switch (item.type) {
      case "user_message":
        flush()
        messages.push(userMessage(userParts(item, files, options)))
        break
      case "assistant_message":
      case "tool_call": {
        if (tool) flush()
        assistant ??= []
        assistant.push(
          item.type === "assistant_message"
            ? textPart(item.text)
            : toolCallPart(item.call_id, item.name, item.input)
        )
        break
      }
      case "tool_result":
        if (assistant) {
          messages.push(assistantMessage(assistant))
          assistant = undefined
        }
        tool ??= []
        tool.push(toolResultPart(item.call_id, item.name, item.output, item.is_error))
        break
    }
  }
  flush()
  return Prompt.fromMessages(messages)
}

/** How files reach the provider: `binary` providers take images and PDFs as their own file input. */
export interface FileOptions {
  readonly binary: boolean
}

/** Media types a model reads as text. */
const isTextual = (contentType: string) => {
  const type = contentType.split(";")[0]!.trim().toLowerCase()
  return type.startsWith("text/") || type === "application/json" || type.endsWith("+json") || type === "application/xml" ||
    type.endsWith("+xml") || type === "application/yaml" || type === "application/x-yaml" || type === "application/javascript"
}

const isBinaryInput = (contentType: string) => {
  const type = contentType.split(";")[0]!.trim().toLowerCase()
  return type.startsWith("image/") || type === "application/pdf"
}

/**
 * A user message's parts (D13): its text, then each of its files as text (textual types, UTF-8),
 * as the provider's own file input (images and PDFs, when it takes them), or else as a line that
 * names the file; a file deleted since the run was created is named as gone.
 */
const userParts = (
  item: Extract<ConversationItem, { type: "user_message" }>,
  files: ReadonlyMap<string, Uint8Array>,
  options: FileOptions
): Array<Prompt.UserMessagePart> => {
  const parts: Array<Prompt.UserMessagePart> = [textPart(item.text)]
  for (const file of item.files ?? []) {
    const bytes = files.get(file.file_id)
    const label = `"${file.filename}" (${file.file_id}, ${file.content_type}, ${file.bytes} bytes)`
    if (bytes === undefined) {
      parts.push(textPart(`[file ${label}: deleted, no longer available]`))
    } else if (isTextual(file.content_type)) {
      parts.push(textPart(`[file ${label}]\n${Buffer.from(bytes).toString("utf8")}`))
    } else if (options.binary && isBinaryInput(file.content_type)) {
      parts.push(filePart(file.content_type, file.filename, bytes))
    } else {
      parts.push(textPart(`[file ${label}: this model cannot read its content type]`))
    }
  }
  return parts
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
