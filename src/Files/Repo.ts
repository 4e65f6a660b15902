/**
 * Files and their bytes (D13, migration 0013): metadata rows in `files`, the bytes as consecutive
 * FILE_CHUNK_BYTES slices in `file_chunks`. Writes go chunk by chunk and reads slice by slice, so
 * neither side holds a whole file.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { type FileObject, FilePurpose } from "../Domain/Files.js"
import { EnvironmentName, toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import { countStorage, releaseStorage } from "../Quotas/Queries.js"

/** The size of one stored slice of a file's bytes (the last one may be shorter). */
export const FILE_CHUNK_BYTES = 512 * 1024

export const FileRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  filename: Schema.String,
  content_type: Schema.String,
  bytes: Rows.Int8,
  sha256: Schema.String,
  purpose: FilePurpose,
  run_id: Schema.NullOr(Schema.String),
  workspace_id: Schema.NullOr(Schema.String),
  created_at: Rows.Time
})
export type FileRow = typeof FileRow.Type

export const toFile = (r: FileRow): FileObject => ({
  id: r.id,
  object: "file",
  filename: r.filename,
  bytes: r.bytes,
  content_type: r.content_type,
  sha256: r.sha256,
  purpose: r.purpose,
  run_id: r.run_id,
  workspace_id: r.workspace_id,
  created_at: toIso(r.created_at)
})

const columns = "id, tenant_id, environment, filename, content_type, bytes, sha256, purpose, run_id, workspace_id, created_at"

/**
 * Which files of a cell a caller reaches: all of them, or (a workspace-bound key, D20) only those
 * of its workspace.
 */
export interface Reach extends CellRef {
  readonly workspaceId?: string | undefined
}

const Slice = Schema.Struct({ data: Rows.Bytes })

export class FilesRepo extends Effect.Service<FilesRepo>()("FilesRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const cols = sql.literal(columns)

    /**
     * The file's row, its bytes counted in the cell's stored bytes; with `storageLimit` (an upload)
     * only while they fit within it: false, and nothing written, when they do not.
     */
    const insert = (row: FileRow & { readonly created_by_key_id: string | null }, storageLimit?: number) =>
      sql`WITH counted AS (${countStorage(sql, { tenantId: row.tenant_id, environment: row.environment }, row.bytes, storageLimit)})
          INSERT INTO files (id, tenant_id, environment, filename, content_type, bytes, sha256, purpose, run_id,
            workspace_id, created_by_key_id, created_at)
          SELECT ${row.id}, ${row.tenant_id}, ${row.environment}, ${row.filename}, ${row.content_type}, ${row.bytes},
            ${row.sha256}, ${row.purpose}, ${row.run_id}, ${row.workspace_id}, ${row.created_by_key_id}, ${row.created_at}
          WHERE EXISTS (SELECT 1 FROM counted)
          RETURNING id`.pipe(Effect.map((rows) => rows.length > 0))

    const insertChunk = (fileId: string, index: number, data: Uint8Array) =>
      sql`INSERT INTO file_chunks (file_id, index, data) VALUES (${fileId}, ${index}, ${data})`.pipe(Rows.none)

    /** The files `reach` covers. */
    const within = (reach: Reach) =>
      sql`tenant_id = ${reach.tenantId} AND environment = ${reach.environment}
          ${reach.workspaceId === undefined ? sql`` : sql`AND workspace_id = ${reach.workspaceId}`}`

    const file = (reach: Reach, id: string) =>
      sql`SELECT ${cols} FROM files WHERE id = ${id} AND ${within(reach)}`.pipe(Rows.maybe(FileRow))

    /** The files among `ids` that `reach` covers (run input references). */
    const filesOf = (reach: Reach, ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.succeed([])
        : sql`SELECT ${cols} FROM files WHERE id IN ${sql.in(ids)} AND ${within(reach)}`.pipe(Rows.all(FileRow))

    const list = (
      reach: Reach,
      after: string | undefined,
      limit: number,
      filter: { readonly purpose?: FilePurpose | undefined; readonly workspace_id?: string | undefined }
    ) =>
      sql`SELECT ${cols} FROM files WHERE ${within(reach)}
          ${filter.purpose === undefined ? sql`` : sql`AND purpose = ${filter.purpose}`}
          ${filter.workspace_id === undefined ? sql`` : sql`AND workspace_id = ${filter.workspace_id}`}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(FileRow))

    /** Deletes the file (its chunks cascade) and gives its bytes back to the cell's stored bytes. */
    const remove = (reach: Reach, id: string) =>
      sql`WITH deleted AS (
            DELETE FROM files WHERE id = ${id} AND ${within(reach)}
            RETURNING id, bytes
          ), released AS (${releaseStorage(sql, reach, sql`deleted`)})
          SELECT id FROM deleted`.pipe(Effect.map((rows) => rows.length > 0))

    /** `length` bytes of chunk `index` from byte `offset` within it (Postgres reads only those TOAST pages). */
    const slice = (fileId: string, index: number, offset: number, length: number) =>
      sql`SELECT substring(data FROM ${offset + 1} FOR ${length}) AS data FROM file_chunks
          WHERE file_id = ${fileId} AND index = ${index}`.pipe(Rows.maybe(Slice), Effect.map((r) => r?.data))

    return { insert, insertChunk, file, filesOf, list, remove, slice } as const
  })
}) {}
