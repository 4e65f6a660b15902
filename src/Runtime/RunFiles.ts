/**
 * Files in a run (D13): the bytes of the files its input names, read for each model call (a file
 * deleted since is left out and named as such), and the files a model's answer carries, each
 * written as a `run_output` file with its `run.file.created` event in the step's commit, or, when it
 * does not fit the cell's `storage_bytes` quota (D20), reported by `run.file.failed` instead.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect } from "effect"

import type { ConversationItem, ProducedFile } from "../Domain/Conversation.js"
import { filenameProblem, isMediaType } from "../Domain/Files.js"
import { Trigger } from "../Domain/RunState.js"
import { Files, type StorageFull } from "../Files.js"
import { makeId } from "../Kernel/Ids.js"
import { quotaMessage } from "../Quotas.js"
import type { Commit, RunRow } from "../Runs.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

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

/** A file of a model's answer: the commit that stores it, and the one that reports it was not stored. */
export interface OutputFile {
  readonly id: string
  readonly stored: Commit<StorageFull>
  readonly refused: Commit
}

/** The files of a model's answer, to commit before the answer's own commits (`committedWithFiles`). */
export const producedFiles = (row: RunRow, produced: ReadonlyArray<ProducedFile> | undefined, storageLimit: number) =>
  Effect.gen(function*() {
    const files = yield* Files
    const outputs: Array<OutputFile> = []
    for (const [n, file] of (produced ?? []).entries()) {
      const id = yield* makeId("file")
      const content = Buffer.from(file.data, "base64")
      const filename = filenameProblem(file.filename) === undefined ? file.filename : `output-${n}`
      outputs.push({
        id,
        stored: {
          trigger: Trigger.FileCreated(),
          data: { file_id: id, filename, bytes: content.length },
          also: files.produce(row, {
            id,
            filename,
            contentType: isMediaType(file.content_type) ? file.content_type : "application/octet-stream",
            content
          }, storageLimit)
        },
        refused: {
          trigger: Trigger.FileFailed(),
          data: {
            filename,
            bytes: content.length,
            error: { type: "quota_exceeded", message: quotaMessage("storage_bytes", storageLimit, yield* now) }
          }
        }
      })
    }
    return outputs
  })

/**
 * Commits an answer after its files (one transaction). A file that does not fit the cell's
 * `storage_bytes` quota rolls that transaction back; it is then committed again with that file
 * reported (`run.file.failed`, error `quota_exceeded`, as a tool's failure is) instead of stored,
 * so the run goes on and what is used never passes the limit (D20).
 */
export const committedWithFiles = (
  commit: <E>(...commits: ReadonlyArray<Commit<E>>) => Effect.Effect<boolean, SqlError | E>,
  files: ReadonlyArray<OutputFile>,
  answer: ReadonlyArray<Commit>,
  refused: ReadonlySet<string> = new Set()
): Effect.Effect<boolean, SqlError> =>
  commit(...files.map((f) => (refused.has(f.id) ? f.refused : f.stored)), ...answer).pipe(
    Effect.catchTag("StorageFull", ({ fileId }) => committedWithFiles(commit, files, answer, new Set([...refused, fileId])))
  )
