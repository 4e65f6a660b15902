/**
 * Workspace memory (D14): a key/value store per workspace with a version per key. Customers list,
 * read, write (`if_version` for optimistic concurrency) and delete items over HTTP; agents whose
 * revision has `memory: true` read and write them through the built-in tools `memory_get` and
 * `memory_put` (the run actor calls `toolCall`, src/Runtime/ToolCalls.ts).
 *
 * `if_version`: omitted, a write always succeeds; `0`, only if the key does not exist; `n > 0`, only
 * if the key exists at version `n`. Anything else is 409 `version_conflict`. A deleted key starts
 * again at version 1.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Data, Effect, FiberRef, ParseResult, Schema } from "effect"

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
import { cellKey, type CellRef, type Principal } from "./Kernel/Principal.js"
import { currentRequest } from "./Kernel/RequestContext.js"
import { MemoryRepo, type Place, toItem, type Write } from "./Memory/Repo.js"

/** What a built-in memory tool answers the agent: an output, or an error it can read. */
export type ToolAnswer =
  | { readonly ok: true; readonly output: unknown }
  | { readonly ok: false; readonly error: { readonly type: string; readonly message: string } }

/** Where an agent's tool call reads and writes: its run's workspace; the run is who writes. */
export interface ToolTarget {
  readonly cell: CellRef
  readonly workspaceId: string
  readonly runId: string
}

/** The run's commit refused the answer (the run changed meanwhile): its write is rolled back. */
class AnswerRefused extends Data.TaggedError("AnswerRefused") {}

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

const tooLarge = (bytes: number) => `The value is ${bytes} bytes as JSON; a memory value holds at most ${MAX_VALUE_BYTES} bytes (64 KiB)`

/** Who a request writes as: the user of its `X-Actor-Token` (resolved by the pipeline), else its key. */
const writerOf = (p: Principal): Effect.Effect<UpdatedBy> =>
  Effect.map(FiberRef.get(currentRequest), (state) => state.actingUser ?? p.actor)

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

    /** Writes as `if_version` allows (the module's comment); undefined when it does not. */
    const write = (place: Place, w: Write, ifVersion: number | undefined) =>
      ifVersion === undefined
        ? repo.upsert(place, w)
        : ifVersion === 0
        ? repo.create(place, w)
        : repo.replace(place, w, ifVersion)

    const put = (p: Principal, workspaceId: string, key: string, body: PutMemoryItem) =>
      Effect.gen(function*() {
        const place = yield* placeOf(p, workspaceId)
        const { bytes, json } = serialised(body.value)
        if (bytes > MAX_VALUE_BYTES) return yield* invalid("value_too_large", tooLarge(bytes), "value")
        const row = yield* write(place, { key, json, by: yield* writerOf(p), at: yield* now }, body.if_version)
        if (row === undefined) {
          return yield* conflict(
            "version_conflict",
            body.if_version === 0
              ? `The key ${key} exists already (if_version 0 writes only a new key)`
              : `The key ${key} is not at version ${body.if_version}: read it again and retry`
          )
        }
        return toItem(row)
      })

    const remove = (p: Principal, workspaceId: string, key: string) =>
      Effect.gen(function*() {
        if (!(yield* repo.remove(yield* placeOf(p, workspaceId), key))) return yield* missingItem
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
              const row = yield* repo.upsert(place, {
                key,
                json,
                by: { type: "run", id: target.runId },
                at: yield* now
              })
              if (!(yield* answer({ ok: true, output: { key, version: row.version } }))) return yield* new AnswerRefused()
              return true
            }).pipe(sql.withTransaction, Effect.catchTag("AnswerRefused", () => Effect.succeed(false)))
          }
        })
      )
    }

    return {
      list: (p: Principal, workspaceId: string, params: MemoryListParams) => dieOnSqlError(list(p, workspaceId, params)),
      get: (p: Principal, workspaceId: string, key: string) => dieOnSqlError(get(p, workspaceId, key)),
      put: (p: Principal, workspaceId: string, key: string, body: PutMemoryItem) => dieOnSqlError(put(p, workspaceId, key, body)),
      remove: (p: Principal, workspaceId: string, key: string) => dieOnSqlError(remove(p, workspaceId, key)),
      toolCall
    } as const
  }),
  dependencies: [MemoryRepo.Default, Agents.Default]
}) {}
