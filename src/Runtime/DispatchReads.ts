/**
 * What a run actor reads before its first model call (issue 20): whether the run's key may still
 * act, the pinned revision with its model profile, and the conversation's window. In Postgres, one
 * statement (one round trip and one snapshot) made of the three queries their owners keep
 * (`authorizationQuery`, `revisionContextQuery`, `itemsQuery`), where three statements were read
 * one after the other with nothing dispatched between them. Later dispatches read the key and the
 * window on their own, as before.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect, Layer, Schema } from "effect"

import { Agents } from "../Agents.js"
import { RevisionContext, revisionContextQuery } from "../Agents/Queries.js"
import { Platform } from "../Platform.js"
import { Authorization, authorizationOf, authorizationQuery } from "../Platform/Queries.js"
import { RunStore } from "../Runs.js"
import { itemsQuery } from "../Runs/Queries.js"

/** The run as these reads need it. */
export interface Dispatched {
  readonly key_id: string
  readonly user_id: string | null
  readonly agent_revision_id: string
  readonly conversation_id: string
}

export interface FirstDispatch {
  readonly authorization: Authorization
  /** undefined: the revision (or its model profile) is gone */
  readonly revision: RevisionContext | undefined
  /** the conversation's window, in order (JSON, decoded by the reader) */
  readonly items: ReadonlyArray<unknown>
}

export class DispatchReads extends Context.Tag("DispatchReads")<DispatchReads, {
  readonly first: (run: Dispatched, budgetBytes: number) => Effect.Effect<FirstDispatch, SqlError>
}>() {}

const Combined = Schema.Struct({
  authorization: Schema.NullOr(Authorization),
  model_profile_id: Schema.NullOr(Schema.String),
  items: Schema.NullOr(Schema.Array(Schema.Unknown))
})
const decodeCombined = Schema.decodeUnknown(Combined)
const decodeRevision = Schema.decodeUnknown(RevisionContext)

/** The revision's columns, as `revisionContextQuery` names them. */
const REVISION_COLUMNS = Object.keys(RevisionContext.fields).map((c) => `c.${c}`).join(", ")

/** In Postgres: one statement. */
export const DispatchReadsSql: Layer.Layer<DispatchReads, never, SqlClient.SqlClient> = Layer.effect(
  DispatchReads,
  Effect.map(SqlClient.SqlClient, (sql) => ({
    first: (run, budgetBytes) =>
      Effect.gen(function*() {
        const at = new Date(yield* Clock.currentTimeMillis)
        const row = yield* sql`
          SELECT a.authorization, ${sql.literal(REVISION_COLUMNS)},
                 (SELECT jsonb_agg(w.item ORDER BY w.position) FROM (${itemsQuery(sql, run.conversation_id, budgetBytes)}) w) AS items
          FROM (SELECT 1) one
          LEFT JOIN (${authorizationQuery(sql, run.key_id, run.user_id, at)}) a ON TRUE
          LEFT JOIN (${revisionContextQuery(sql, run.agent_revision_id)}) c ON TRUE`.pipe(
          Effect.map((rows) => rows[0])
        )
        const combined = yield* Effect.orDie(decodeCombined(row))
        return {
          authorization: authorizationOf(combined.authorization),
          revision: combined.model_profile_id === null ? undefined : yield* Effect.orDie(decodeRevision(row)),
          items: combined.items ?? []
        }
      })
  }))
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
