/**
 * The `scripted` model provider (decisions D12): a deterministic language model for sandboxes and
 * customers' own tests, built as a real `@effect/ai` `LanguageModel` (via `LanguageModel.make`) so
 * the same pipeline that calls OpenAI or Anthropic calls it.
 *
 * `settings.steps` is a list; each model call takes the next step and the last step repeats:
 *   - `{"type":"text","text":"..."}`: a text response; `{{input}}` is replaced by the text of the
 *     latest user message in the prompt. Finish reason `stop`.
 *   - `{"type":"tool_call","tool":"<name>","input":{...}}`: one tool-call part (name = tool,
 *     params = input, id `call_<call index>`), finish reason `tool-calls`. It is never executed
 *     here; callers pass `disableToolCallResolution: true` and decide what to do with it. The tool
 *     must be offered in the request's toolkit (the library decodes the response against the
 *     toolkit), otherwise the call fails with `AiError.MalformedOutput`.
 *   - `{"type":"fail","message":"..."}`: the call fails with `AiError.UnknownError` whose
 *     `description` is the message.
 *   - `{"type":"sleep","seconds":N}`: `Effect.sleep` N seconds on Effect's `Clock`, then the next
 *     step is taken in the same call. A sleep is therefore not a call of its own: it belongs to the
 *     call that takes the step after it.
 *   - `{"type":"file","filename":"...","content":"...","content_type"?}` (D13): the answer of the
 *     call that takes the step after it carries this file as a `file` response part (the content
 *     as UTF-8, the filename in the part's `scripted` metadata), before its text or tool call.
 *
 * Statelessness: the model keeps no counter. Which step a call takes is derived from the prompt
 * alone: the call index is the number of assistant turns already in the prompt (a maximal run of
 * consecutive assistant messages counts as one turn). Call 0 takes the first non-sleep step (after
 * the sleeps before it), call n the (n+1)-th non-sleep step, and calls past the end take the last
 * step again (without the sleeps before it). So a recovered run that replays the same conversation
 * gets the same step, and two runs never share state. Consequence: a `fail` step produces no
 * assistant turn, so retrying the same conversation hits the same `fail` step again.
 *
 * Usage counts whitespace-separated words as tokens: input tokens = words in the prompt's text
 * (system message content and the text parts of user/assistant messages); output tokens = words of
 * the produced text, or of `JSON.stringify(input)` for a tool call. Reported in the finish part.
 *
 * The step schema (D12) is `ScriptedSettings` in src/Domain/Agents.ts, where model profiles are
 * validated at creation.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import { Duration, Effect, Layer, Stream } from "effect"

import type { ScriptedSettings, ScriptedStep } from "../Domain/Agents.js"

// -----------------------------------------------------------------------------
// Step selection
// -----------------------------------------------------------------------------

type AnswerStep = Exclude<ScriptedStep, { readonly type: "sleep" | "file" }>
type FileStep = Extract<ScriptedStep, { readonly type: "file" }>

/** What one model call does: sleep this many seconds (in order), then answer with `step` (and `files`). */
export interface PlannedCall {
  readonly sleeps: ReadonlyArray<number>
  readonly files: ReadonlyArray<FileStep>
  /** Index of `step` in `settings.steps`. */
  readonly stepIndex: number
  readonly step: AnswerStep
}

/**
 * Groups the steps into calls: each answer step together with the sleeps and files right before
 * it. Sleeps and files after the last answer step (refused by `ScriptedSettings`) are ignored.
 */
const planCalls = (steps: ReadonlyArray<ScriptedStep>): ReadonlyArray<PlannedCall> => {
  const calls: Array<PlannedCall> = []
  let sleeps: Array<number> = []
  let files: Array<FileStep> = []
  steps.forEach((step, stepIndex) => {
    if (step.type === "sleep") {
      sleeps.push(step.seconds)
    } else if (step.type === "file") {
      files.push(step)
    } else {
      calls.push({ sleeps, files, stepIndex, step })
      sleeps = []
      files = []
    }
  })
  return calls
}

/**
 * Whether call number `callIndex` answers at once: no sleep before it, and an answer (text or tool
 * calls), not a failure (which the run actor retries after a pause when it is a rate limit).
 */
export const answersAtOnce = (settings: ScriptedSettings, callIndex: number): boolean => {
  const call = planCall(planCalls(settings.steps), callIndex)
  return call.sleeps.length === 0 && (call.step.type === "text" || call.step.type === "tool_call")
}

/** Number of assistant turns in the prompt; consecutive assistant messages are one turn. */
export const assistantTurns = (prompt: Prompt.Prompt): number => {
  let turns = 0
  let previous: string | undefined
  for (const message of prompt.content) {
    if (message.role === "assistant" && previous !== "assistant") turns++
    previous = message.role
  }
  return turns
}

/** The call the model makes as call number `callIndex` (0-based); past the end, the last repeats. */
export const planCall = (
  calls: ReadonlyArray<PlannedCall>,
  callIndex: number
): PlannedCall => {
  if (callIndex < calls.length) return calls[callIndex]!
  const last = calls[calls.length - 1]!
  return { ...last, sleeps: [], files: [] }
}

// -----------------------------------------------------------------------------
// Prompt helpers
// -----------------------------------------------------------------------------

export const countWords = (text: string): number => {
  const trimmed = text.trim()
  return trimmed === "" ? 0 : trimmed.split(/\s+/).length
}

const textsOf = (message: Prompt.Message): ReadonlyArray<string> => {
  if (message.role === "system") return [message.content]
  if (message.role === "tool") return []
  const texts: Array<string> = []
  for (const part of message.content) {
    if (part.type === "text") texts.push(part.text)
  }
  return texts
}

/** Words in the prompt's text: system content and user/assistant text parts. */
export const promptWords = (prompt: Prompt.Prompt): number =>
  prompt.content.reduce(
    (sum, message) => sum + textsOf(message).reduce((s, text) => s + countWords(text), 0),
    0
  )

/** Text of the latest user message (its text parts joined by newlines), or "" if none. */
export const latestUserText = (prompt: Prompt.Prompt): string => {
  for (let i = prompt.content.length - 1; i >= 0; i--) {
    const message = prompt.content[i]!
    if (message.role === "user") return textsOf(message).join("\n")
  }
  return ""
}

// -----------------------------------------------------------------------------
// Provider
// -----------------------------------------------------------------------------

const MODULE = "ScriptedLanguageModel"

const respond = (
  calls: ReadonlyArray<PlannedCall>,
  options: LanguageModel.ProviderOptions,
  method: string
): Effect.Effect<Array<Response.PartEncoded>, AiError.AiError> =>
  Effect.gen(function*() {
    const callIndex = assistantTurns(options.prompt)
    const call = planCall(calls, callIndex)
    for (const seconds of call.sleeps) {
      yield* Effect.sleep(Duration.seconds(seconds))
    }
    const inputTokens = promptWords(options.prompt)
    const metadata: Response.PartEncoded = {
      type: "response-metadata",
      id: `scripted_${callIndex}`,
      modelId: "scripted"
    }
    const step = call.step
    const files = call.files.map((file): Response.PartEncoded => ({
      type: "file",
      mediaType: file.content_type ?? "text/plain; charset=utf-8",
      data: Buffer.from(file.content, "utf8").toString("base64"),
      metadata: { scripted: { filename: file.filename } }
    }))
    switch (step.type) {
      case "fail":
        return yield* new AiError.UnknownError({ module: MODULE, method, description: step.message })
      case "text": {
        const text = step.text.replaceAll("{{input}}", latestUserText(options.prompt))
        const outputTokens = countWords(text)
        return [
          metadata,
          ...files,
          { type: "text", text },
          {
            type: "finish",
            reason: "stop",
            usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }
          }
        ]
      }
      case "tool_call": {
        if (!options.tools.some((tool) => tool.name === step.tool)) {
          return yield* new AiError.MalformedOutput({
            module: MODULE,
            method,
            description: `scripted step ${call.stepIndex} calls tool '${step.tool}', ` +
              `which is not offered in this request (offered: ${options.tools.map((tool) => tool.name).join(", ") || "none"})`
          })
        }
        const outputTokens = countWords(JSON.stringify(step.input))
        return [
          metadata,
          ...files,
          { type: "tool-call", id: `call_${callIndex}`, name: step.tool, params: step.input },
          {
            type: "finish",
            reason: "tool-calls",
            usage: { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }
          }
        ]
      }
    }
  })

/** Turns a complete response into the equivalent stream parts (one text delta per text part). */
const toStreamParts = (
  parts: ReadonlyArray<Response.PartEncoded>
): Array<Response.StreamPartEncoded> =>
  parts.flatMap((part, i): Array<Response.StreamPartEncoded> => {
    if (part.type !== "text") return [part as Response.StreamPartEncoded]
    const id = `text_${i}`
    return [
      { type: "text-start", id },
      { type: "text-delta", id, delta: part.text },
      { type: "text-end", id }
    ]
  })

/** The scripted model as a `LanguageModel.Service`. `settings` must already be validated. */
export const make = (settings: ScriptedSettings): Effect.Effect<LanguageModel.Service> => {
  const calls = planCalls(settings.steps)
  return LanguageModel.make({
    generateText: (options) => respond(calls, options, "generateText"),
    streamText: (options) =>
      respond(calls, options, "streamText").pipe(
        Effect.map((parts) => Stream.fromIterable(toStreamParts(parts))),
        Stream.unwrap
      )
  })
}

/** A layer providing `LanguageModel.LanguageModel` backed by the scripted model. */
export const layer = (settings: ScriptedSettings): Layer.Layer<LanguageModel.LanguageModel> =>
  Layer.effect(LanguageModel.LanguageModel, make(settings))
