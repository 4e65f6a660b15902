/**
 * Files (D13): bytes customers upload for runs to read (`run_input`, `knowledge`) and files runs
 * produce (`run_output`), stored in Postgres with their SHA-256, so a backup holds everything.
 */
import { Multipart } from "@effect/platform"
import { Option, Schema } from "effect"

import { ListParams } from "../Kernel/Cursor.js"
import { Timestamp } from "../Kernel/Ids.js"
import { RefString } from "../Kernel/Strings.js"

/** The largest upload: exactly 25 MiB is accepted, one byte more is 400 `file_too_large`. */
export const MAX_FILE_BYTES = 25 * 1024 * 1024

/** A filename holds at most this many characters. */
export const MAX_FILENAME = 255

export const UploadPurpose = Schema.Literal("run_input", "knowledge").annotations({
  description: "`run_input`: for runs to read as input items; `knowledge`: reference material"
})
export type UploadPurpose = typeof UploadPurpose.Type

export const FilePurpose = Schema.Literal("run_input", "knowledge", "run_output").annotations({
  description: "Why the file exists: uploaded as `run_input` or `knowledge`, or produced by a run (`run_output`)"
})
export type FilePurpose = typeof FilePurpose.Type

export const FileObject = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("file"),
  filename: Schema.String.annotations({ description: "The name it was uploaded (or produced) with" }),
  bytes: Schema.Number.annotations({ description: "Size in bytes" }),
  content_type: Schema.String.annotations({ description: "The media type given at upload (`application/octet-stream` when none)" }),
  sha256: Schema.String.annotations({ description: "Lowercase hex SHA-256 of the bytes; also the download's `ETag`" }),
  purpose: FilePurpose,
  run_id: Schema.NullOr(Schema.String).annotations({ description: "The run that produced it (`run_output`), else null" }),
  workspace_id: Schema.NullOr(Schema.String).annotations({
    description: "The workspace it belongs to (the one its upload named, or its run's), or null: a file of the environment. " +
      "A workspace-bound key (the quickstart key) sees only its workspace's files"
  }),
  created_at: Timestamp
}).annotations({ identifier: "File" })
export type FileObject = typeof FileObject.Type

export const DeletedFile = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("file"),
  deleted: Schema.Literal(true)
}).annotations({ identifier: "DeletedFile" })

export const FileListParams = Schema.Struct({
  ...ListParams.fields,
  purpose: Schema.optional(FilePurpose).annotations({ description: "Only files of this purpose" }),
  workspace_id: Schema.optional(RefString).annotations({ description: "Only files of this workspace" })
})
export type FileListParams = typeof FileListParams.Type

/** Media types the platform stores and serves as given: `type/subtype` with optional parameters, no control characters. */
export const isMediaType = (s: string): boolean =>
  s.length <= 255 && /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(\s*;\s*[^\u0000-\u001F\u007F]*)?$/.test(s)

/** Why a filename is refused, or undefined: 1..255 characters, no control characters, no path separators. */
export const filenameProblem = (name: string): string | undefined => {
  if (name.length === 0) return "must not be empty"
  if (name.length > MAX_FILENAME) return `must be at most ${MAX_FILENAME} characters`
  if (/[\u0000-\u001F\u007F-\u009F]/.test(name)) return "must not contain control characters"
  if (/[/\\]/.test(name)) return "must not contain / or \\"
  return undefined
}

/**
 * An upload's file part as the request pipeline staged it (src/Edge/Multipart.ts): on disk, with
 * its size and SHA-256, both taken while it streamed in.
 */
export interface StagedFile extends Multipart.PersistedFile {
  readonly bytes: number
  readonly sha256: string
}

export const isStagedFile = (u: unknown): u is StagedFile =>
  Multipart.isPersistedFile(u) && typeof (u as StagedFile).sha256 === "string" && typeof (u as StagedFile).bytes === "number"

/** What a multipart upload may hold beyond its file: the boundaries, part headers and fields. */
export const UPLOAD_SLACK = 64 * 1024

/**
 * How an upload's multipart body is read (`@effect/platform` Multipart limits, enforced while
 * streaming to a staged file): one file part, small fields, and no part treated as a field because
 * of its media type (a JSON file is a file). The parser counts a part's trailing line break as its
 * own, so its limit has slack; the exact limit (MAX_FILE_BYTES) is checked on the staged file.
 */
export const UPLOAD_LIMITS = {
  maxParts: Option.some(8),
  maxFieldSize: 1024,
  maxFileSize: Option.some(MAX_FILE_BYTES + UPLOAD_SLACK),
  maxTotalSize: Option.some(MAX_FILE_BYTES + 2 * UPLOAD_SLACK),
  fieldMimeTypes: []
}
