/**
 * SQL of workspace memory (D14, migration 0014). Rows decoded; no service logic. Each write is one
 * statement, so two writers of a key are serialised by its row: the version goes up by one per
 * write, and a conditional write (`if_version`) sees the version it replaces.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { MemoryItem, UpdatedBy } from "../Domain/Memory.js"
import { toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"

export const MemoryRow = Schema.Struct({
  key: Schema.String,
  value: Schema.Unknown,
  version: Schema.Number,
  updated_at: Rows.Time,
  updated_by_type: Schema.Literal("api_key", "user", "run"),
  updated_by_id: Schema.String
})
export type MemoryRow = typeof MemoryRow.Type

/** Where an item lives: a workspace of a cell. */
export interface Place {
  readonly cell: CellRef
  readonly workspaceId: string
}

/** A write: the value (serialised as measured), who makes it, when. */
export interface Write {
  readonly key: string
  readonly json: string
  readonly by: UpdatedBy
  readonly at: Date
}

/**
 * Keys are `[A-Za-z0-9._:-]`, all below `~` byte-wise: every key that starts with `prefix` sorts
 * before `prefix || '~'`, and every other key at or after `prefix` sorts after it. So a prefix is
 * the primary key's range [prefix, prefix || '~').
 */
const PREFIX_END = "~"

const COLUMNS = "key, value, version, updated_at, updated_by_type, updated_by_id"

export class MemoryRepo extends Effect.Service<MemoryRepo>()("MemoryRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(COLUMNS)
    const at = (p: Place) => sql`tenant_id = ${p.cell.tenantId} AND environment = ${p.cell.environment} AND workspace_id = ${p.workspaceId}`
    const values = (p: Place, w: Write) =>
      sql`(${p.cell.tenantId}, ${p.cell.environment}, ${p.workspaceId}, ${w.key}, ${w.json}::json, 1, ${w.at},
           ${w.by.type}, ${w.by.id})`
    const INSERT = sql.literal(
      "INSERT INTO workspace_memory (tenant_id, environment, workspace_id, key, value, version, updated_at, updated_by_type, updated_by_id)"
    )

    /** Items in key order (byte-wise), after `after`, starting with `prefix`: `limit + 1` of them. */
    const list = (p: Place, prefix: string, after: string | undefined, limit: number) =>
      sql`SELECT ${columns} FROM workspace_memory
          WHERE ${at(p)}
            ${prefix === "" ? sql`` : sql`AND key >= ${prefix} AND key < ${prefix + PREFIX_END}`}
            ${after === undefined ? sql`` : sql`AND key > ${after}`}
          ORDER BY key LIMIT ${limit + 1}`.pipe(Rows.all(MemoryRow))

    const get = (p: Place, key: string) =>
      sql`SELECT ${columns} FROM workspace_memory WHERE ${at(p)} AND key = ${key}`.pipe(Rows.maybe(MemoryRow))

    /** Creates the key (version 1) or replaces its value (version + 1). */
    const upsert = (p: Place, w: Write) =>
      sql`${INSERT} VALUES ${values(p, w)}
          ON CONFLICT (tenant_id, environment, workspace_id, key) DO UPDATE SET
            value = EXCLUDED.value, version = workspace_memory.version + 1, updated_at = EXCLUDED.updated_at,
            updated_by_type = EXCLUDED.updated_by_type, updated_by_id = EXCLUDED.updated_by_id
          RETURNING ${columns}`.pipe(Rows.single(MemoryRow))

    /** Creates the key (version 1); undefined when it exists. */
    const create = (p: Place, w: Write) =>
      sql`${INSERT} VALUES ${values(p, w)}
          ON CONFLICT (tenant_id, environment, workspace_id, key) DO NOTHING
          RETURNING ${columns}`.pipe(Rows.maybe(MemoryRow))

    /** Replaces the value if the key's version is `version`; undefined otherwise (stale, or no such key). */
    const replace = (p: Place, w: Write, version: number) =>
      sql`UPDATE workspace_memory SET value = ${w.json}::json, version = version + 1, updated_at = ${w.at},
                                      updated_by_type = ${w.by.type}, updated_by_id = ${w.by.id}
          WHERE ${at(p)} AND key = ${w.key} AND version = ${version}
          RETURNING ${columns}`.pipe(Rows.maybe(MemoryRow))

    /** Deletes the key; false when there is none. */
    const remove = (p: Place, key: string) =>
      sql`DELETE FROM workspace_memory WHERE ${at(p)} AND key = ${key} RETURNING key`.pipe(
        Rows.all(Schema.Struct({ key: Schema.String })),
        Effect.map((rows) => rows.length > 0)
      )

    return { list, get, upsert, create, replace, remove } as const
  })
}) {}

export const toItem = (r: MemoryRow): MemoryItem => ({
  object: "memory_item",
  key: r.key,
  value: r.value,
  version: r.version,
  updated_at: toIso(r.updated_at),
  updated_by: { type: r.updated_by_type, id: r.updated_by_id }
})
