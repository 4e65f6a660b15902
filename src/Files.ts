/**
 * Files (D13): uploads (the multipart body was parsed and staged on disk by the request pipeline,
 * within the 25 MiB limit), run outputs, and downloads that stream the stored bytes with
 * `ETag` (the SHA-256), `If-None-Match` (304) and one `Range` (206; past the end 416).
 *
 * An upload is copied from its staged file (hashed as it was staged) into Postgres chunk by chunk
 * inside the request's transaction, so memory stays flat and the file exists whole or not at all.
 */
import { createHash } from "node:crypto"
import { createReadStream } from "node:fs"

import type { Multipart } from "@effect/platform"
import { HttpServerResponse } from "@effect/platform"
import { Clock, Data, Effect, Option, Stream } from "effect"

import { Agents } from "./Agents.js"
import { dieOnSqlError } from "./Database/Defects.js"
import { type FileListParams, filenameProblem, isMediaType, isStagedFile, MAX_FILE_BYTES, type UploadPurpose } from "./Domain/Files.js"
import { type ByteRange, contentDisposition, parseRange } from "./Files/Download.js"
import { FILE_CHUNK_BYTES, type FileRow, FilesRepo, type Reach, toFile } from "./Files/Repo.js"
import * as Cursor from "./Kernel/Cursor.js"
import { forbidden, invalid, notFound, RangeNotSatisfiable } from "./Kernel/Errors.js"
import { CurrentShare, NODE_KEY } from "./Kernel/FairShare.js"
import { makeId } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { Principal } from "./Kernel/Principal.js"
import { asCell, sharedBy, Shares } from "./Kernel/Shares.js"
import { setResponseHeader } from "./Kernel/UnitOfWork.js"
import { Platform } from "./Platform.js"
import { quotaExceeded } from "./Quotas.js"

export interface Upload {
  readonly file: Multipart.PersistedFile
  readonly purpose: UploadPurpose
  readonly workspace_id?: string | undefined
}

/** Fixed-size slices of a byte stream (the last may be shorter). */
const slices = async function*(source: AsyncIterable<Buffer>) {
  let pending: Array<Buffer> = []
  let size = 0
  for await (const buffer of source) {
    pending.push(buffer)
    size += buffer.length
    while (size >= FILE_CHUNK_BYTES) {
      const all = Buffer.concat(pending, size)
      yield all.subarray(0, FILE_CHUNK_BYTES)
      pending = [all.subarray(FILE_CHUNK_BYTES)]
      size -= FILE_CHUNK_BYTES
    }
  }
  if (size > 0) yield Buffer.concat(pending, size)
}

/** A run's output file does not fit the cell's `storage_bytes` quota (D20): nothing of it is written. */
export class StorageFull extends Data.TaggedError("StorageFull")<{ readonly fileId: string; readonly limit: number }> {}

export class Files extends Effect.Service<Files>()("Files", {
  effect: Effect.gen(function*() {
    const repo = yield* FilesRepo
    const platform = yield* Platform
    const agents = yield* Agents
    const shares = yield* Shares
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /** The files a key reaches (D20): a workspace-bound key (the quickstart key) only its workspace's. */
    const reachOf = (p: Principal) =>
      Effect.map(platform.allowedWorkspace(p), (bound): Reach => ({
        tenantId: p.tenantId,
        environment: p.environment,
        workspaceId: Option.getOrUndefined(bound)
      }))

    /**
     * The workspace an upload belongs to: the one it names (of the environment, else 404), none (the
     * environment's); through a workspace-bound key always its own (naming another is 403).
     */
    const workspaceOf = (p: Principal, named: string | undefined) =>
      Effect.gen(function*() {
        if (named !== undefined) yield* agents.getWorkspace(p, named)
        const bound = Option.getOrUndefined(yield* platform.allowedWorkspace(p))
        if (bound === undefined) return named ?? null
        if (bound === "" || (named !== undefined && named !== bound)) {
          return yield* forbidden("workspace_not_allowed", "This key can act only in its own (quickstart) workspace")
        }
        return bound
      })

    const found = (row: FileRow | undefined) => (row ? Effect.succeed(row) : Effect.fail(notFound("file", "file_id")))

    /** Copies the staged file into chunks (its size and SHA-256 were taken as it was staged). */
    const store = (fileId: string, path: string) =>
      Effect.gen(function*() {
        let index = 0
        const chunks = Stream.fromAsyncIterable(
          slices(createReadStream(path, { highWaterMark: FILE_CHUNK_BYTES })),
          (e) => new Error(`reading the staged upload failed: ${String(e)}`)
        )
        yield* Stream.runForEach(chunks, (chunk) => repo.insertChunk(fileId, index++, chunk)).pipe(
          Effect.catchTag("SqlError", Effect.die),
          Effect.orDie
        )
      })

    /** An upload: refused with 429 `quota_exceeded` when its bytes do not fit the cell's `storage_bytes` quota. */
    const upload = (p: Principal, { file, purpose, workspace_id }: Upload, storageLimit: number) =>
      Effect.gen(function*() {
        if (!isStagedFile(file)) return yield* Effect.dieMessage("an upload's file part is staged by the request pipeline")
        const problem = filenameProblem(file.name)
        if (problem !== undefined) return yield* invalid("invalid_filename", `The file's name ${problem}`, "file")
        const contentType = file.contentType === "" ? "application/octet-stream" : file.contentType
        if (!isMediaType(contentType)) {
          return yield* invalid("parameter_invalid", "The file part's Content-Type is not a media type", "file")
        }
        const workspaceId = yield* workspaceOf(p, workspace_id)
        const { bytes, sha256 } = file
        if (bytes === 0) return yield* invalid("file_empty", "The file is empty", "file")
        if (bytes > MAX_FILE_BYTES) return yield* invalid("file_too_large", `A file holds at most ${MAX_FILE_BYTES} bytes (25 MiB)`, "file")
        const id = yield* makeId("file")
        yield* store(id, file.path)
        const row: FileRow = {
          id,
          tenant_id: p.tenantId,
          environment: p.environment,
          filename: file.name,
          content_type: contentType,
          bytes,
          sha256,
          purpose,
          run_id: null,
          workspace_id: workspaceId,
          created_at: yield* now
        }
        if (!(yield* repo.insert({ ...row, created_by_key_id: p.keyId }, storageLimit))) {
          return yield* quotaExceeded("storage_bytes", storageLimit, row.created_at)
        }
        return toFile(row)
      })

    /**
     * A file a run produced, in its run's workspace, written with the step that produced it (in its
     * transaction); its bytes counted only while they fit `storageLimit`, else StorageFull (the
     * step's transaction then rolls back, and the run reports the file as not stored).
     */
    const produce = (run: {
      readonly id: string
      readonly tenant_id: string
      readonly environment: FileRow["environment"]
      readonly workspace_id: string
    }, file: {
      readonly id: string
      readonly filename: string
      readonly contentType: string
      readonly content: Uint8Array
    }, storageLimit: number) =>
      Effect.gen(function*() {
        const data = Buffer.from(file.content.buffer, file.content.byteOffset, file.content.byteLength)
        for (let i = 0, index = 0; i < data.length; i += FILE_CHUNK_BYTES, index++) {
          yield* repo.insertChunk(file.id, index, data.subarray(i, i + FILE_CHUNK_BYTES))
        }
        const stored = yield* repo.insert({
          id: file.id,
          tenant_id: run.tenant_id,
          environment: run.environment,
          filename: file.filename,
          content_type: file.contentType,
          bytes: data.length,
          sha256: createHash("sha256").update(data).digest("hex"),
          purpose: "run_output",
          run_id: run.id,
          workspace_id: run.workspace_id,
          created_at: yield* now,
          created_by_key_id: null
        }, storageLimit)
        if (!stored) return yield* new StorageFull({ fileId: file.id, limit: storageLimit })
      })

    /** The bytes of `range` (inclusive ends), slice by slice from the stored chunks. */
    const bytesOf = (fileId: string, range: ByteRange, share: string = NODE_KEY) =>
      Stream.fromIterable(chunkIndexes(range)).pipe(
        Stream.mapEffect(
          ({ index, offset, length }) =>
            Effect.flatMap(repo.slice(fileId, index, offset, length), (data) =>
              data === undefined || data.length !== length
                ? Effect.dieMessage(`file ${fileId}: chunk ${index} is missing or short`)
                : Effect.succeed(data)).pipe(
                // (issue 36) each slice waits for its cell's share of the node's bytes; the response
                // is written outside the request's fiber, so the cell is named here
                sharedBy(shares, "bytes"),
                asCell(shares, share)
              ), // the next slices are read while one is written (in order; at most 4 slices in memory)
          { concurrency: 4 }
        ),
        Stream.catchTag("SqlError", (e) => Stream.die(e))
      )

    const content = (p: Principal, id: string, headers: Readonly<Record<string, string | undefined>>) =>
      Effect.gen(function*() {
        const row = yield* found(yield* repo.file(yield* reachOf(p), id))
        const etag = `"${row.sha256}"`
        const common = {
          etag,
          "accept-ranges": "bytes",
          "content-disposition": contentDisposition(row.filename),
          ...DOWNLOAD_HEADERS
        }
        if (matchesEtag(headers["if-none-match"], etag)) {
          return HttpServerResponse.empty({ status: 304, headers: common })
        }
        const ifRange = headers["if-range"]
        const range = ifRange !== undefined && ifRange !== etag ? undefined : parseRange(headers["range"], row.bytes)
        if (range === "unsatisfiable") {
          yield* setResponseHeader("content-range", `bytes */${row.bytes}`)
          for (const [name, value] of Object.entries(DOWNLOAD_HEADERS)) yield* setResponseHeader(name, value)
          return yield* new RangeNotSatisfiable({
            code: "range_not_satisfiable",
            message: `The range starts past the end of the file (${row.bytes} bytes)`,
            param: "Range"
          })
        }
        const whole: ByteRange = { start: 0, end: row.bytes - 1 }
        const served = range ?? whole
        const length = served.end - served.start + 1
        return HttpServerResponse.stream(length > 0 ? bytesOf(row.id, served, yield* CurrentShare) : Stream.empty, {
          status: range === undefined ? 200 : 206,
          contentType: row.content_type,
          contentLength: length,
          headers: {
            ...common,
            ...(range === undefined ? {} : { "content-range": `bytes ${served.start}-${served.end}/${row.bytes}` })
          }
        })
      })

    return {
      upload: (p: Gated<Principal>, payload: Upload, storageLimit: number) => dieOnSqlError(upload(p, payload, storageLimit)),
      produce,
      get: (p: Principal, id: string) =>
        dieOnSqlError(Effect.map(Effect.flatMap(Effect.flatMap(reachOf(p), (reach) => repo.file(reach, id)), found), toFile)),
      list: (p: Principal, params: FileListParams) =>
        dieOnSqlError(Effect.flatMap(reachOf(p), (reach) =>
          Cursor.listPage(
            "files",
            (_t, _e, after, limit) => repo.list(reach, after, limit, params),
            toFile
          )(p, params))),
      remove: (p: Gated<Principal>, id: string) =>
        dieOnSqlError(
          Effect.flatMap(Effect.flatMap(reachOf(p), (reach) => repo.remove(reach, id)), (deleted) =>
            deleted ? Effect.succeed({ id, object: "file" as const, deleted: true as const }) : Effect.fail(notFound("file", "file_id")))
        ),
      content: (p: Principal, id: string, headers: Readonly<Record<string, string | undefined>>) => dieOnSqlError(content(p, id, headers)),
      /** The files among `ids` that `reach` covers (run input references), by id. */
      filesOf: (reach: Reach, ids: ReadonlyArray<string>) =>
        Effect.map(repo.filesOf(reach, ids), (rows) => new Map(rows.map((r) => [r.id, r] as const))),
      /** The whole content of a file (run inputs for a model). */
      readAll: (fileId: string, bytes: number) =>
        Stream.runCollect(bytesOf(fileId, { start: 0, end: bytes - 1 })).pipe(
          Effect.map((chunks) => Buffer.concat(Array.from(chunks, (c) => Buffer.from(c))))
        )
    } as const
  }),
  dependencies: [FilesRepo.Default, Platform.Default, Agents.Default]
}) {}

/** Every download's: a browser neither guesses another type than the stored one nor runs what the file holds (D20). */
const DOWNLOAD_HEADERS = { "x-content-type-options": "nosniff", "content-security-policy": "sandbox" } as const

/** The stored chunks a byte range covers: each one's index, and the offset and length within it. */
export const chunkIndexes = (range: ByteRange) => {
  const out: Array<{ index: number; offset: number; length: number }> = []
  for (let index = Math.floor(range.start / FILE_CHUNK_BYTES); index * FILE_CHUNK_BYTES <= range.end; index++) {
    const chunkStart = index * FILE_CHUNK_BYTES
    const from = Math.max(range.start, chunkStart)
    const to = Math.min(range.end, chunkStart + FILE_CHUNK_BYTES - 1)
    out.push({ index, offset: from - chunkStart, length: to - from + 1 })
  }
  return out
}

/** `If-None-Match`: `*` or a list of entity tags (weak comparison). */
const matchesEtag = (header: string | undefined, etag: string) =>
  header !== undefined &&
  (header.trim() === "*" || header.split(",").some((tag) => tag.trim().replace(/^W\//, "") === etag))
