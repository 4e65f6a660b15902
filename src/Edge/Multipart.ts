/**
 * A `multipart/form-data` body read inside Effect (D13, D20). multipasta's push parser is fed the
 * request's bytes chunk by chunk, and every call into it (`make`, `write`, `end`) is an
 * `Effect.try`: what it throws (a `filename*` that does not percent-decode throws `URIError`) stays
 * in this request, as the refusal of a malformed body, instead of escaping from a stream callback
 * and ending the process. Fields are kept as text; each file part is written to a staged file in
 * `dir` while it is hashed (SHA-256) and counted, and refused the moment it passes `maxFileBytes`.
 * The next chunk of the body is read only once the last one is on disk.
 */
import { createHash, type Hash } from "node:crypto"
import type { Readable } from "node:stream"

import { FileSystem, Multipart } from "@effect/platform"
import * as NodeStream from "@effect/platform-node/NodeStream"
import { Data, Effect, Inspectable, Stream } from "effect"
import * as MP from "multipasta"

import type { StagedFile } from "../Domain/Files.js"

/** Why a body was refused: a limit (the part being read when it was reached), or unreadable. */
export class MultipartRefused extends Data.TaggedError("MultipartRefused")<{
  readonly reason: "Malformed" | "Unreadable" | "FileTooLarge" | "MaxParts" | "MaxTotalSize" | "MaxPartSize" | "MaxFieldSize"
  /** the name of the part being read */
  readonly part?: string | undefined
  readonly cause?: unknown
}> {}

export interface MultipartLimits {
  readonly maxParts: number
  readonly maxFieldSize: number
  readonly maxPartSize: number
  readonly maxTotalSize: number
  /** the exact limit of one file part's bytes */
  readonly maxFileBytes: number
}

class Staged extends Inspectable.Class implements StagedFile {
  readonly [Multipart.TypeId]: Multipart.TypeId = Multipart.TypeId
  readonly _tag = "PersistedFile"
  constructor(
    readonly key: string,
    readonly name: string,
    readonly contentType: string,
    readonly path: string,
    readonly bytes: number,
    readonly sha256: string
  ) {
    super()
  }
  toJSON() {
    return { _id: "StagedFile", key: this.key, name: this.name, contentType: this.contentType, bytes: this.bytes }
  }
}

/** A file part being staged. */
interface Staging {
  readonly info: MP.PartInfo
  readonly path: string
  readonly hash: Hash
  bytes: number
  file?: FileSystem.File
}

const malformed = (cause: unknown) => new MultipartRefused({ reason: "Malformed", cause })

/**
 * Reads the multipart body of `source` (whose headers give the boundary) under `limits`: its fields
 * and its file parts (staged in `dir`, open until the scope closes), as the platform's
 * `Multipart.Persisted`. Refused (MultipartRefused) when it is malformed, unreadable or too large;
 * the rest of the body is then left unread in `source`.
 */
export const readMultipart = (
  source: Readable,
  headers: Readonly<Record<string, string>>,
  dir: string,
  limits: MultipartLimits,
  /** how each chunk's work (parse, hash, write) is granted: the cell's share of the node's bytes (issue 36) */
  pace: <A, E, R>(chunk: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R> = (chunk) => chunk
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const parts: Array<{ readonly key: string; readonly value: string } | Staging> = []
    /** file chunks the parser gave during the last write, written to disk before the next one */
    const pending: Array<{ readonly staging: Staging; readonly chunk: Uint8Array }> = []
    let failure: MultipartRefused | undefined
    let done = false
    let total = 0
    /** the part whose headers were read last */
    let current: string | undefined

    const parser = yield* Effect.try({
      try: () =>
        MP.make({
          headers: headers as Record<string, string>,
          maxParts: limits.maxParts,
          maxFieldSize: limits.maxFieldSize,
          maxPartSize: limits.maxPartSize,
          maxTotalSize: limits.maxTotalSize,
          // called with every part's headers (fields included): the part being read
          isFile: (info) => {
            current = info.name
            return MP.defaultIsFile(info)
          },
          onField: (info, value) => void parts.push({ key: info.name, value: MP.decodeField(info, value) }),
          onFile: (info) => {
            const staging: Staging = { info, path: `${dir}/part-${parts.length}`, hash: createHash("sha256"), bytes: 0 }
            parts.push(staging)
            return (chunk) => void (chunk === null ? undefined : pending.push({ staging, chunk }))
          },
          onError: (error) => {
            failure ??= error._tag === "ReachedLimit"
              ? new MultipartRefused({ reason: error.limit, part: current })
              : malformed(error)
          },
          onDone: () => void (done = true)
        }),
      catch: malformed
    })

    /** The chunks of the last write, to their staged files (each opened at its first chunk). */
    const flush = Effect.gen(function*() {
      for (const { chunk, staging } of pending.splice(0)) {
        staging.bytes += chunk.length
        if (staging.bytes > limits.maxFileBytes) {
          return yield* new MultipartRefused({ reason: "FileTooLarge", part: staging.info.name })
        }
        staging.hash.update(chunk)
        // (a disk that fails is the service's fault: a defect, 500)
        staging.file ??= yield* Effect.orDie(fs.open(staging.path, { flag: "w" }))
        yield* Effect.orDie(staging.file.writeAll(chunk))
      }
    })

    /** Feeds the parser one call's worth (`write` or `end`); its refusal, if any. */
    const feed = (call: () => void) =>
      Effect.try({ try: call, catch: malformed }).pipe(
        Effect.zipRight(Effect.suspend(() => (failure === undefined ? flush : Effect.fail(failure))))
      )

    const body = NodeStream.fromReadable<MultipartRefused, Uint8Array>(
      () => source,
      (cause) => new MultipartRefused({ reason: "Unreadable", cause }),
      { closeOnDone: false }
    )
    yield* Stream.runForEach(body, (chunk) =>
      Effect.suspend(() => {
        total += chunk.length
        if (total > limits.maxTotalSize) return Effect.fail(new MultipartRefused({ reason: "MaxTotalSize", part: current }))
        // after the closing boundary, the rest of the body is read and discarded
        return done ? Effect.void : pace(feed(() => parser.write(chunk)))
      }))
    if (!done) yield* feed(() => parser.end())
    if (!done) return yield* malformed("the body ended before its closing boundary")

    // As the platform's Multipart.toPersisted keeps them: fields as text (several of one name as a
    // list), files as lists.
    const persisted: Record<string, string | Array<string> | Array<Multipart.PersistedFile>> = Object.create(null)
    for (const part of parts) {
      if ("value" in part) {
        const existing = persisted[part.key]
        persisted[part.key] = existing === undefined
          ? part.value
          : typeof existing === "string"
          ? [existing, part.value]
          : [...(existing as Array<string>), part.value]
        continue
      }
      // a file part with no byte was never opened: staged empty all the same
      if (part.file === undefined) yield* fs.writeFile(part.path, new Uint8Array(0)).pipe(Effect.orDie)
      const { info } = part
      const file = new Staged(info.name, info.filename ?? info.name, info.contentType, part.path, part.bytes, part.hash.digest("hex"))
      const existing = persisted[info.name]
      persisted[info.name] = Array.isArray(existing) ? [...(existing as Array<Multipart.PersistedFile>), file] : [file]
    }
    return persisted as Multipart.Persisted
  })
