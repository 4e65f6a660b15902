/**
 * Workspace memory (D14): a key/value store per workspace with a version per key. Customers list,
 * read, write (`if_version` for optimistic concurrency) and delete items over HTTP; agents whose
 * revision has `memory: true` read and write them through the built-in tools `memory_get` and
 * `memory_put` (the run actor calls `toolCall`, src/Runtime/ToolCalls.ts).
 *
 * `if_version`: omitted, a write always succeeds; `0`, only if the key does not exist; `n > 0`, only
 * if the key exists at version `n`. Anything else is 409 `version_conflict`. A deleted key starts
 * again at version 1.
 *
 * Values count toward the cell's `storage_bytes` quota (D20): a write that does not fit writes
 * nothing, 429 `quota_exceeded` over HTTP, a tool error for an agent's `memory_put`.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Data, Effect, ParseResult, Schema } from "effect"

import { Agents } from "./Agents.js"
import { dieOnSqlError } from "./Database/Defects.js"
import {
  MAX_VALUE_BYTES,
  MemoryGetInput,
  type MemoryListParams,
  MemoryPutInput,
  type MemoryToolName,
  type PutMemoryItem,
  serialised,
  type UpdatedBy,
  valueProblem
} from "./Domain/Memory.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import type { Gated } from "./Kernel/Policy.js"
import { cellKey, type CellRef, type Principal } from "./Kernel/Principal.js"
import { actingUser } from "./Kernel/UnitOfWork.js"
import { MemoryRepo, type MemoryRow, type Place, toItem, type Write } from "./Memory/Repo.js"
import { quotaExceeded, quotaMessage } from "./Quotas.js"

/** What a built-in memory tool answers the agent: an output, or an error it can read. */
export type ToolAnswer =
  | { readonly ok: true; readonly output: unknown }
  | { readonly ok: false; readonly error: { readonly type: string; readonly message: string } }

/** Where an agent's tool call reads and writes: its run's workspace; the run is who writes. */
export interface ToolTarget {
  readonly cell: CellRef
  readonly workspaceId: string
  readonly runId: string
  /** the cell's `storage_bytes` quota (D20: memory values count toward it) */
  readonly storageLimit: number
}

/** A write as `if_version` and the storage quota allowed it: the item written, or why none was. */
type Written =
  | { readonly _tag: "Written"; readonly row: MemoryRow }
  | { readonly _tag: "VersionConflict" }
  | { readonly _tag: "OverQuota" }

/** The run's commit refused the answer (the run changed meanwhile): its write is rolled back. */
class AnswerRefused extends Data.TaggedError("AnswerRefused") {}

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

const tooLarge = (bytes: number) => `The value is ${bytes} bytes as JSON; a memory value holds at most ${MAX_VALUE_BYTES} bytes (64 KiB)`

/** Who a request writes as: the user of its `X-Actor-Token` (resolved by the pipeline), else its key. */
const writerOf = (p: Principal) => Effect.map(actingUser, (user): UpdatedBy => user ?? p.actor)

/** A tool input's first problem, as the model reads it. */
const problemOf = (error: ParseResult.ParseError) => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  return issue === undefined ? "is invalid" : `${issue.path.length > 0 ? issue.path.join(".") + ": " : ""}${issue.message}`
}

export class Memory extends Effect.Service<Memory>()("Memory", {
  effect: Effect.gen(function*() {
    const repo = yield* MemoryRepo
    const agents = yield* Agents
    const sql = yield* SqlClient.SqlClient

    /** The workspace of the caller's cell (another cell's is missing, with the same body). */
    const placeOf = (p: Principal, workspaceId: string) =>
      Effect.as(agents.getWorkspace(p, workspaceId), { cell: p, workspaceId } satisfies Place)

    const missingItem = notFound("memory item", "key")

    const list = (p: Principal, workspaceId: string, params: MemoryListParams) =>
      Effect.gen(function*() {
        const place = yield* placeOf(p, workspaceId)
        const prefix = params.prefix ?? ""
        const name = `memory:${workspaceId}:${prefix}`
        const after = yield* Cursor.decode(params.cursor, name, cellKey(p))
        const limit = params.limit ?? Cursor.DEFAULT_LIMIT
        const rows = yield* repo.list(place, prefix, after, limit)
        const items = rows.slice(0, limit)
        return {
          items: items.map(toItem),
          next_cursor: rows.length > limit ? Cursor.encode(name, cellKey(p), items[items.length - 1]!.key) : null
        }
      })

    const get = (p: Principal, workspaceId: string, key: string) =>
      Effect.gen(function*() {
        const row = yield* repo.get(yield* placeOf(p, workspaceId), key)
        return row ? toItem(row) : yield* missingItem
      })

    /** The caller's workspace, held for its transaction's writes (another cell's is missing). */
    const heldPlace = (p: Principal, workspaceId: string) =>
      Effect.flatMap(
        repo.hold({ cell: p, workspaceId }),
        (held) => held ? Effect.succeed({ cell: p, workspaceId } satisfies Place) : Effect.fail(notFound("workspace", "workspace_id"))
      )

    /**
     * Writes as `if_version` allows (the module's comment) and the value's size fits `storageLimit`
     * (the difference with the value it replaces counts). The workspace is held.
     */
    const write = (place: Place, w: Write, bytes: number, ifVersion: number | undefined, storageLimit: number) =>
      Effect.gen(function*() {
        const before = yield* repo.stored(place, w.key)
        if (ifVersion !== undefined && ifVersion !== (before?.version ?? 0)) return { _tag: "VersionConflict" } as const
        const row = before === undefined
          ? yield* repo.insert(place, w, bytes, storageLimit)
          : yield* repo.update(place, w, bytes - before.bytes, storageLimit)
        return row === undefined ? { _tag: "OverQuota" } as const : { _tag: "Written", row } as const
      }) satisfies Effect.Effect<Written, SqlError>

    const put = (p: Principal, workspaceId: string, key: string, body: PutMemoryItem, storageLimit: number) =>
      Effect.gen(function*() {
        const place = yield* heldPlace(p, workspaceId)
        const { bytes, json } = serialised(body.value)
        if (bytes > MAX_VALUE_BYTES) return yield* invalid("value_too_large", tooLarge(bytes), "value")
        const at = yield* now
        const written = yield* write(place, { key, json, by: yield* writerOf(p), at }, bytes, body.if_version, storageLimit)
        switch (written._tag) {
          case "Written":
            return toItem(written.row)
          case "OverQuota":
            return yield* quotaExceeded("storage_bytes", storageLimit, at)
          case "VersionConflict":
            return yield* conflict(
              "version_conflict",
              body.if_version === 0
                ? `The key ${key} exists already (if_version 0 writes only a new key)`
                : `The key ${key} is not at version ${body.if_version}: read it again and retry`
            )
        }
      })

    const remove = (p: Principal, workspaceId: string, key: string) =>
      Effect.gen(function*() {
        if (!(yield* repo.remove(yield* heldPlace(p, workspaceId), key))) return yield* missingItem
        return { object: "memory_item" as const, key, deleted: true as const }
      })

    /**
     * A built-in tool call of an agent: `answer` commits the answer to the run (false: the run
     * changed meanwhile). `memory_put`'s write and that commit are one transaction, so the write
     * exists exactly when the answer (and its event) does. Bad input is an answer too (an error).
     */
    const toolCall = (
      target: ToolTarget,
      name: MemoryToolName,
      input: unknown,
      answer: (a: ToolAnswer) => Effect.Effect<boolean, SqlError>
    ): Effect.Effect<boolean, SqlError> => {
      const place: Place = { cell: target.cell, workspaceId: target.workspaceId }
      const refuse = (type: string, message: string) => answer({ ok: false, error: { type, message } })
      if (name === "memory_get") {
        return Schema.decodeUnknown(MemoryGetInput)(input, { onExcessProperty: "error" }).pipe(
          Effect.matchEffect({
            onFailure: (e) => refuse("invalid_input", `The input is invalid: ${problemOf(e)}`),
            onSuccess: ({ key }) =>
              Effect.flatMap(repo.get(place, key), (row) =>
                answer({
                  ok: true,
                  output: row ? { key, value: row.value, version: row.version } : { key, found: false }
                }))
          })
        )
      }
      return Schema.decodeUnknown(MemoryPutInput)(input, { onExcessProperty: "error", exact: true }).pipe(
        Effect.matchEffect({
          onFailure: (e) => refuse("invalid_input", `The input is invalid: ${problemOf(e)}`),
          onSuccess: ({ key, value }) => {
            const problem = valueProblem(value)
            if (problem !== undefined) return refuse("invalid_input", `The input is invalid: ${problem}`)
            const { bytes, json } = serialised(value)
            if (bytes > MAX_VALUE_BYTES) return refuse("value_too_large", tooLarge(bytes))
            return Effect.gen(function*() {
              yield* repo.hold(place)
              const at = yield* now
              const written = yield* write(
                place,
                { key, json, by: { type: "run", id: target.runId }, at },
                bytes,
                undefined,
                target.storageLimit
              )
              // past the quota: nothing written, a tool error the run reports (D20)
              const answered = written._tag === "Written"
                ? yield* answer({ ok: true, output: { key, version: written.row.version } })
                : yield* refuse("quota_exceeded", quotaMessage("storage_bytes", target.storageLimit, at))
              if (!answered) return yield* new AnswerRefused()
              return true
            }).pipe(sql.withTransaction, Effect.catchTag("AnswerRefused", () => Effect.succeed(false)))
          }
        })
      )
    }

    return {
      list: (p: Principal, workspaceId: string, params: MemoryListParams) => dieOnSqlError(list(p, workspaceId, params)),
      get: (p: Principal, workspaceId: string, key: string) => dieOnSqlError(get(p, workspaceId, key)),
      put: (p: Gated<Principal>, workspaceId: string, key: string, body: PutMemoryItem, storageLimit: number) =>
        dieOnSqlError(put(p, workspaceId, key, body, storageLimit)),
      remove: (p: Gated<Principal>, workspaceId: string, key: string) => dieOnSqlError(remove(p, workspaceId, key)),
      toolCall
    } as const
  }),
  dependencies: [MemoryRepo.Default, Agents.Default]
}) {}
