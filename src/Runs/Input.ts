/**
 * A run's input as admitted (D13, D19): each text item within MAX_RUN_TEXT characters, at most
 * MAX_INPUT_FILES file items, each naming a file of the caller's environment (of its workspace, for
 * a workspace-bound key, D20); and the user message the conversation records for it (its text items
 * joined, its files by id, name and type).
 */
import { Effect } from "effect"

import type { InputFile } from "../Domain/Conversation.js"
import { type InputContent, MAX_INPUT_FILES, MAX_RUN_TEXT } from "../Domain/Runs.js"
import type { Files } from "../Files.js"
import { invalid, notFound } from "../Kernel/Errors.js"
import type { CellRef } from "../Kernel/Principal.js"

export const admittedInput = (
  files: Files,
  cell: CellRef,
  input: ReadonlyArray<InputContent>,
  /** a workspace-bound key's workspace: only its files may be named (D20) */
  workspaceId?: string
) =>
  Effect.gen(function*() {
    const tooLarge = input.findIndex((c) => c.type === "text" && c.text.length > MAX_RUN_TEXT)
    if (tooLarge >= 0) {
      return yield* invalid(
        "input_too_large",
        `input.${tooLarge}.text: a text item holds at most ${MAX_RUN_TEXT} characters`,
        `input.${tooLarge}.text`
      )
    }
    const fileItems = input.flatMap((c, i) => (c.type === "file" ? [{ i, id: c.file_id }] : []))
    if (fileItems.length > MAX_INPUT_FILES) {
      return yield* invalid(
        "too_many_files",
        `A run's input holds at most ${MAX_INPUT_FILES} files`,
        `input.${fileItems[MAX_INPUT_FILES]!.i}`
      )
    }
    const found = yield* files.filesOf(
      { tenantId: cell.tenantId, environment: cell.environment, workspaceId },
      fileItems.map((f) => f.id)
    )
    const named: Array<InputFile> = []
    for (const { i, id } of fileItems) {
      const row = found.get(id)
      if (row === undefined) return yield* notFound("file", `input.${i}.file_id`)
      named.push({ file_id: row.id, filename: row.filename, content_type: row.content_type, bytes: row.bytes })
    }
    const text = input.flatMap((c) => (c.type === "text" ? [c.text] : [])).join("\n")
    return { type: "user_message" as const, text, ...(named.length === 0 ? {} : { files: named }) }
  })
