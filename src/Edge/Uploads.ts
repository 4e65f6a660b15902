/**
 * A file upload's way through the pipeline (D13, D19): its `multipart/form-data` body is read with
 * `@effect/platform`'s Multipart under UPLOAD_LIMITS, the file part streamed to a staged file in a
 * temporary directory (refused the moment it passes 25 MiB, the rest of the body discarded), so
 * its checks and its idempotency fingerprint (which covers the bytes' SHA-256) come before the
 * request's transaction, as a JSON body's do. The HttpApi reads the same parsed body (the request
 * caches it); the staged directory is removed when the upload's scope closes.
 */
import { createHash } from "node:crypto"
import { createReadStream } from "node:fs"

import { type HttpServerRequest, Multipart } from "@effect/platform"
import { Duration, Effect, Option, Scope } from "effect"

import { MAX_FILE_BYTES, UPLOAD_LIMITS } from "../Domain/Files.js"
import { InvalidRequest } from "../Kernel/Errors.js"
import { linger } from "./Hygiene.js"

const MAX_BODY = Option.getOrThrow(UPLOAD_LIMITS.maxTotalSize)

const tooLarge = () =>
  new InvalidRequest({
    code: "file_too_large",
    message: `A file holds at most ${MAX_FILE_BYTES} bytes (25 MiB)`,
    param: "file"
  })

/** The limit a multipart error reports (the staged-file writer wraps it as an `InternalError`). */
const reasonOf = (error: Multipart.MultipartError): Multipart.MultipartError["reason"] => {
  const cause = error.cause as { readonly _tag?: string; readonly limit?: string } | undefined
  if (error.reason !== "InternalError" || cause?._tag !== "ReachedLimit") return error.reason
  return cause.limit === "MaxPartSize"
    ? "FileTooLarge"
    : cause.limit === "MaxTotalSize"
    ? "BodyTooLarge"
    : cause.limit === "MaxParts"
    ? "TooManyParts"
    : "FieldTooLarge"
}

const missingFile = () =>
  new InvalidRequest({ code: "parameter_missing", message: "Send exactly one file part named `file`", param: "file" })

const refusal = (error: Multipart.MultipartError): InvalidRequest => {
  switch (reasonOf(error)) {
    case "FileTooLarge":
    case "BodyTooLarge":
      return tooLarge()
    case "TooManyParts":
      return new InvalidRequest({ code: "invalid_request", message: "The body has too many parts: send `file` and `purpose`" })
    case "FieldTooLarge":
      return new InvalidRequest({ code: "parameter_invalid", message: "A form field is longer than 1024 bytes", param: "purpose" })
    default:
      return new InvalidRequest({ code: "invalid_request", message: "The multipart/form-data body could not be read" })
  }
}

const sha256Of = (path: string) =>
  Effect.tryPromise({
    try: async () => {
      const hash = createHash("sha256")
      let bytes = 0
      for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
        hash.update(chunk)
        bytes += chunk.length
      }
      return { sha256: hash.digest("hex"), bytes }
    },
    catch: (e) => new Error(`reading the staged upload failed: ${String(e)}`)
  }).pipe(Effect.orDie)

/**
 * The upload's checks before its transaction; the text its idempotency fingerprint covers (the
 * purpose, the part's name and type, and the bytes' size and SHA-256). The staged file lives as
 * long as `scope`.
 */
export const preparedUpload = (request: HttpServerRequest.HttpServerRequest, scope: Scope.Scope, timeoutSeconds: number) =>
  Effect.gen(function*() {
    const contentType = request.headers["content-type"] ?? ""
    if (!/^multipart\/form-data\s*;/i.test(contentType)) {
      return yield* new InvalidRequest({
        code: "unsupported_content_type",
        message: "Upload a file as `multipart/form-data` with a `file` part and a `purpose` field",
        param: "Content-Type"
      })
    }
    const declared = request.headers["content-length"]
    // (@effect/platform-node's multipart reader never finishes on a body of no bytes: refused here)
    if (declared !== undefined && Number(declared) === 0) return yield* missingFile()
    if (declared !== undefined && Number(declared) > MAX_BODY) {
      linger(request)
      return yield* tooLarge()
    }
    const persisted = yield* Multipart.withLimits(request.multipart, UPLOAD_LIMITS).pipe(
      Effect.catchTag("MultipartError", (error) => {
        linger(request)
        return Effect.fail(refusal(error))
      }),
      Effect.provideService(Scope.Scope, scope),
      // a body that never ends (or a chunked one of no bytes) is refused, as the server's request timeout would
      Effect.timeoutFail({
        duration: Duration.seconds(timeoutSeconds),
        onTimeout: () =>
          new InvalidRequest({ code: "invalid_request", message: `The multipart/form-data body did not end within ${timeoutSeconds} s` })
      })
    )
    for (const key of Object.keys(persisted)) {
      if (key !== "file" && key !== "purpose") {
        return yield* new InvalidRequest({ code: "unknown_parameter", message: `Unknown parameter: ${key}`, param: key })
      }
    }
    const parts = persisted["file"]
    const file = Array.isArray(parts) && parts.length === 1 && Multipart.isPersistedFile(parts[0]) ? parts[0] : undefined
    if (file === undefined) return yield* missingFile()
    const { bytes, sha256 } = yield* sha256Of(file.path)
    if (bytes === 0) return yield* new InvalidRequest({ code: "file_empty", message: "The file is empty", param: "file" })
    if (bytes > MAX_FILE_BYTES) return yield* tooLarge()
    return JSON.stringify({ purpose: persisted["purpose"] ?? null, filename: file.name, content_type: file.contentType, bytes, sha256 })
  })
