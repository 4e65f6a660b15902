/**
 * What a run actor reads before its first model call (issue 20): whether the run's key may still
 * act, the pinned revision with its model profile, and the conversation's window. In Postgres, one
 * statement (one round trip and one snapshot) made of the three queries their owners keep
 * (`firstDispatchQuery`, src/Runs/Queries.ts), where three statements were read one after the other
 * with nothing dispatched between them. Later dispatches read the key and the window on their own.
 *
 * A run admitted by a request of this process had that statement read with the request's last
 * statement (issue 37: `RunStore.takeFirstRead`, a round trip less per run): its actor takes it
 * instead of reading, if it is fresh and no key, tenant or environment was told changed since it
 * was read (`KeyCache.unchangedSince`; a process that is not listening for such changes reads).
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect, Layer, Schema } from "effect"

import { Agents } from "../Agents.js"
import { RevisionContext } from "../Agents/Queries.js"
import { KeyCache, Platform } from "../Platform.js"
import { Authorization, authorizationOf } from "../Platform/Queries.js"
import { RunStore } from "../Runs.js"
import { type Dispatched, firstDispatchQuery } from "../Runs/Queries.js"

export type { Dispatched } from "../Runs/Queries.js"

export interface FirstDispatch {
  readonly authorization: Authorization
  /** undefined: the revision (or its model profile) is gone */
  readonly revision: RevisionContext | undefined
  /** the conversation's window, in order (JSON, decoded by the reader) */
  readonly items: ReadonlyArray<unknown>
}

export class DispatchReads extends Context.Tag("DispatchReads")<DispatchReads, {
  /** `run.id`: the run, whose admission may have read this already (see above) */
  readonly first: (run: Dispatched & { readonly id?: string }, budgetBytes: number) => Effect.Effect<FirstDispatch, SqlError>
}>() {}

const Combined = Schema.Struct({
  authorization: Schema.NullOr(Authorization),
  model_profile_id: Schema.NullOr(Schema.String),
  items: Schema.NullOr(Schema.Array(Schema.Unknown))
})
const decodeCombined = Schema.decodeUnknown(Combined)
const decodeRevision = Schema.decodeUnknown(RevisionContext)

/** The row's first dispatch, decoded. */
const decoded = (row: unknown) =>
  Effect.gen(function*() {
    const combined = yield* Effect.orDie(decodeCombined(row))
    return {
      authorization: authorizationOf(combined.authorization),
      revision: combined.model_profile_id === null ? undefined : yield* Effect.orDie(decodeRevision(row)),
      items: combined.items ?? []
    }
  })

/** The `bytea` columns of the revision, which a row read as JSON has as `\x` hex strings. */
const BYTES = ["credential_ciphertext", "credential_iv", "credential_tag"] as const

/** A row of `firstDispatchQuery` read as JSON (`to_jsonb`), as the driver would have read it. */
const fromJson = (row: unknown): unknown => {
  if (row === null || typeof row !== "object") return row
  const out: Record<string, unknown> = { ...row }
  for (const column of BYTES) {
    const value = out[column]
    if (typeof value === "string" && value.startsWith("\\x")) out[column] = Buffer.from(value.slice(2), "hex")
  }
  return out
}

/** A row of `firstDispatchQuery` read as JSON (the admission's read), decoded. */
export const carriedDispatch = (row: unknown) => decoded(fromJson(row))

/** In Postgres: one statement, or none when the run's admission read it here. */
export const DispatchReadsSql: Layer.Layer<DispatchReads, never, SqlClient.SqlClient | RunStore | KeyCache> = Layer.effect(
  DispatchReads,
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* RunStore
    const keys = yield* KeyCache
    const read = (run: Dispatched, budgetBytes: number) =>
      Effect.gen(function*() {
        const at = new Date(yield* Clock.currentTimeMillis)
        const [row] = yield* firstDispatchQuery(sql, run, budgetBytes, at)
        return yield* decoded(row)
      })
    return {
      first: (run, budgetBytes) =>
        Effect.gen(function*() {
          const carried = run.id === undefined ? undefined : store.takeFirstRead(run.id)
          if (carried !== undefined && (yield* keys.unchangedSince(carried.readAt))) {
            return yield* carriedDispatch(carried.row)
          }
          return yield* read(run, budgetBytes)
        })
    }
  })
)

/** The same reads made one by one through their services (the run actor's tests over memory). */
export const DispatchReadsOfServices: Layer.Layer<DispatchReads, never, Platform | Agents | RunStore> = Layer.effect(
  DispatchReads,
  Effect.gen(function*() {
    const platform = yield* Platform
    const agents = yield* Agents
    const store = yield* RunStore
    return {
      first: (run, budgetBytes) =>
        Effect.all({
          authorization: platform.authorization(run),
          revision: agents.revisionContext(run.agent_revision_id),
          items: store.items(run.conversation_id, budgetBytes)
        })
    }
  })
)
