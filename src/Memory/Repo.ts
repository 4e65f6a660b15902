/**
 * SQL of workspace memory (D14, migration 0014). Rows decoded; no service logic. A value's size
 * (the UTF-8 bytes of its stored JSON) counts in the cell's `storage_bytes` (D20, src/Quotas/Queries.ts):
 * a write holds its workspace first (`hold`, until its transaction ends), so the writes of a
 * workspace are one at a time and each reads the version and size it replaces; the write then
 * counts the difference, in its own statement, only while it fits; a delete gives the bytes back.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { MemoryItem, UpdatedBy } from "../Domain/Memory.js"
import { toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import { countStorage, releaseStorage } from "../Quotas/Queries.js"

export const MemoryRow = Schema.Struct({
  key: Schema.String,
  value: Schema.Unknown,
  version: Schema.Number,
  updated_at: Rows.Time,
  updated_by_type: Schema.Literal("api_key", "user", "run"),
  updated_by_id: Schema.String
})
export type MemoryRow = typeof MemoryRow.Type

/** What a stored key holds now: its version and its size. */
const StoredRow = Schema.Struct({ version: Schema.Number, bytes: Schema.Number })

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
    /** The stored size of a value: its JSON as written (`json` keeps the text), in UTF-8 bytes. */
    const SIZE = sql.literal("octet_length(value::text)")

    /** Items in key order (byte-wise), after `after`, starting with `prefix`: `limit + 1` of them. */
    const list = (p: Place, prefix: string, after: string | undefined, limit: number) =>
      sql`SELECT ${columns} FROM workspace_memory
          WHERE ${at(p)}
            ${prefix === "" ? sql`` : sql`AND key >= ${prefix} AND key < ${prefix + PREFIX_END}`}
            ${after === undefined ? sql`` : sql`AND key > ${after}`}
          ORDER BY key LIMIT ${limit + 1}`.pipe(Rows.all(MemoryRow))

    const get = (p: Place, key: string) =>
      sql`SELECT ${columns} FROM workspace_memory WHERE ${at(p)} AND key = ${key}`.pipe(Rows.maybe(MemoryRow))

    /**
     * Holds the workspace (`FOR NO KEY UPDATE`: agents and conversations may still reference it)
     * until the transaction ends, so its memory writes are one at a time. False: not a workspace of
     * the cell.
     */
    const hold = (p: Place) =>
      sql`SELECT id FROM workspaces WHERE id = ${p.workspaceId} AND tenant_id = ${p.cell.tenantId}
            AND environment = ${p.cell.environment}
          FOR NO KEY UPDATE`.pipe(Effect.map((rows) => rows.length > 0))

    /** The key's version and size, if it is stored. */
    const stored = (p: Place, key: string) =>
      sql`SELECT version, ${SIZE} AS bytes FROM workspace_memory WHERE ${at(p)} AND key = ${key}`.pipe(Rows.maybe(StoredRow))

    /** Creates the key (version 1), its `bytes` counted while they fit `limit`; undefined when they do not. */
    const insert = (p: Place, w: Write, bytes: number, limit: number) =>
      sql`WITH counted AS (${countStorage(sql, p.cell, bytes, limit)})
          INSERT INTO workspace_memory (tenant_id, environment, workspace_id, key, value, version, updated_at, updated_by_type,
                                        updated_by_id)
          SELECT ${p.cell.tenantId}, ${p.cell.environment}, ${p.workspaceId}, ${w.key}, ${w.json}::json, 1, ${w.at}::timestamptz,
                 ${w.by.type}, ${w.by.id}
          WHERE EXISTS (SELECT 1 FROM counted)
          RETURNING ${columns}`.pipe(Rows.maybe(MemoryRow))

    /**
     * Replaces the stored key's value (version + 1): `delta` more bytes counted while they fit
     * `limit` (undefined when they do not), or fewer given back.
     */
    const update = (p: Place, w: Write, delta: number, limit: number) => {
      const set = sql`UPDATE workspace_memory SET value = ${w.json}::json, version = version + 1, updated_at = ${w.at},
                                                  updated_by_type = ${w.by.type}, updated_by_id = ${w.by.id}
                      WHERE ${at(p)} AND key = ${w.key}`
      return (delta > 0
        ? sql`WITH counted AS (${countStorage(sql, p.cell, delta, limit)})
              ${set} AND EXISTS (SELECT 1 FROM counted) RETURNING ${columns}`
        : sql`WITH updated AS (${set} RETURNING ${columns}, ${-delta}::bigint AS bytes),
                   released AS (${releaseStorage(sql, p.cell, sql`updated`)})
              SELECT ${columns} FROM updated`).pipe(Rows.maybe(MemoryRow))
    }

    /** Deletes the key and gives its bytes back; false when there is none. */
    const remove = (p: Place, key: string) =>
      sql`WITH deleted AS (DELETE FROM workspace_memory WHERE ${at(p)} AND key = ${key} RETURNING ${SIZE} AS bytes),
               released AS (${releaseStorage(sql, p.cell, sql`deleted`)})
          SELECT bytes FROM deleted`.pipe(Effect.map((rows) => rows.length > 0))

    return { list, get, hold, stored, insert, update, remove } as const
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
