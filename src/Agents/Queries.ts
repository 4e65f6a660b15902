/**
 * The Agents SQL other capabilities compose (the Agents front door's queries): a run's pinned
 * revision with its model profile, which the Runtime reads with the rest of a run's first dispatch
 * in one round trip (src/Runtime/DispatchReads.ts), and AgentsRepo.revisionContext on its own.
 */
import type { SqlClient } from "@effect/sql"
import { Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { Provider } from "../Domain/Agents.js"

/** The pinned revision of a run and its model profile: what a model step is called with. */
/** A run's pinned revision with its model profile and the profile's sealed credential (one read per run). */
export const RevisionContext = Schema.Struct({
  instructions: Schema.String,
  tool_ids: Schema.Array(Schema.String),
  /** Offer the built-in memory tools (absent: no). */
  memory: Schema.optional(Schema.Boolean),
  model_profile_id: Schema.String,
  provider: Provider,
  model: Schema.String,
  settings: Rows.JsonObject,
  credential_ciphertext: Schema.NullOr(Rows.Bytes),
  credential_iv: Schema.NullOr(Rows.Bytes),
  credential_tag: Schema.NullOr(Rows.Bytes)
})
export type RevisionContext = typeof RevisionContext.Type

/**
 * What a run needs to call the model: the pinned revision and its model profile (a row of
 * `RevisionContext`, none when the revision is gone). A query of its own, so that the run actor's
 * first dispatch can read it with the rest of what it needs (src/Runtime/DispatchReads.ts).
 */
export const revisionContextQuery = (sql: SqlClient.SqlClient, revisionId: string) =>
  sql`SELECT rv.instructions, rv.tool_ids, rv.memory, mp.id AS model_profile_id, mp.provider, mp.model, mp.settings,
             mp.credential_ciphertext, mp.credential_iv, mp.credential_tag
      FROM agent_revisions rv JOIN model_profiles mp ON mp.id = rv.model_profile_id
      WHERE rv.id = ${revisionId}`
