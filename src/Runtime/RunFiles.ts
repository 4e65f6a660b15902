/**
 * Files in a run (D13): the bytes of the files its input names, read for each model call (a file
 * deleted since is left out and named as such), and the files a model's answer carries, each
 * written as a `run_output` file with its `run.file.created` event in the step's commit.
 */
import { Effect } from "effect"

import type { ConversationItem, ProducedFile } from "../Domain/Conversation.js"
import { filenameProblem, isMediaType } from "../Domain/Files.js"
import { Trigger } from "../Domain/RunState.js"
import { Files } from "../Files.js"
import { makeId } from "../Kernel/Ids.js"
import type { Commit, RunRow } from "../Runs/RunStore.js"

/** The bytes of the input files the conversation names, by file id (missing: deleted since). */
export const inputFiles = (row: RunRow, items: ReadonlyArray<ConversationItem>) =>
  Effect.gen(function*() {
    const named = items.flatMap((item) => (item.type === "user_message" ? item.files ?? [] : []))
    const bytes = new Map<string, Uint8Array>()
    if (named.length === 0) return bytes
    const files = yield* Files
    const stored = yield* files.filesOf({ tenantId: row.tenant_id, environment: row.environment }, named.map((f) => f.file_id))
    for (const file of stored.values()) {
      bytes.set(file.id, file.bytes === 0 ? new Uint8Array(0) : yield* files.readAll(file.id, file.bytes))
    }
    return bytes
  })

/** The commits that store the files of a model's answer (before the answer's own commits). */
export const producedFiles = (row: RunRow, produced: ReadonlyArray<ProducedFile> | undefined) =>
  Effect.gen(function*() {
    const files = yield* Files
    const commits: Array<Commit> = []
    for (const [n, file] of (produced ?? []).entries()) {
      const id = yield* makeId("file")
      const content = Buffer.from(file.data, "base64")
      const filename = filenameProblem(file.filename) === undefined ? file.filename : `output-${n}`
      commits.push({
        trigger: Trigger.FileCreated(),
        data: { file_id: id, filename, bytes: content.length },
        also: files.produce(row, {
          id,
          filename,
          contentType: isMediaType(file.content_type) ? file.content_type : "application/octet-stream",
          content
        })
      })
    }
    return commits
  })
