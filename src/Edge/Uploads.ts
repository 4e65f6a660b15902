/**
 * A file upload's way through the pipeline (D13, D19, D20): its `multipart/form-data` body is read
 * under UPLOAD_LIMITS by the guarded reader (src/Edge/Multipart.ts: no input can throw out of the
 * request), the file part staged in a temporary directory while it is hashed (refused the moment
 * it passes 25 MiB, the rest of the body discarded), so its checks and its idempotency
 * fingerprint (which covers the bytes' SHA-256) come before the request's transaction, as a JSON
 * body's do. The HttpApi is given the request with that parsed body (`multipart` answers it, the
 * body is not read twice); the staged directory is removed when the upload's scope closes.
 */
import { FileSystem, type HttpServerRequest, type Multipart } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Duration, Effect, Option, Scope } from "effect"

import { isStagedFile, MAX_FILE_BYTES, UPLOAD_LIMITS } from "../Domain/Files.js"
import { InvalidRequest } from "../Kernel/Errors.js"
import { sharedBy, Shares } from "../Kernel/Shares.js"
import { linger } from "./Hygiene.js"
import { type MultipartLimits, type MultipartRefused, readMultipart } from "./Multipart.js"

const MAX_BODY = Option.getOrThrow(UPLOAD_LIMITS.maxTotalSize)

const LIMITS: MultipartLimits = {
  maxParts: Option.getOrThrow(UPLOAD_LIMITS.maxParts),
  maxFieldSize: UPLOAD_LIMITS.maxFieldSize,
  maxPartSize: Option.getOrThrow(UPLOAD_LIMITS.maxFileSize),
  maxTotalSize: MAX_BODY,
  maxFileBytes: MAX_FILE_BYTES
}

/** The fields an upload may have beside `file`. */
const FIELDS = new Set(["purpose", "workspace_id"])

const tooLarge = () =>
  new InvalidRequest({
    code: "file_too_large",
    message: `A file holds at most ${MAX_FILE_BYTES} bytes (25 MiB)`,
    param: "file"
  })

const missingFile = () =>
  new InvalidRequest({ code: "parameter_missing", message: "Send exactly one file part named `file`", param: "file" })

const refusal = ({ part, reason }: MultipartRefused): InvalidRequest => {
  switch (reason) {
    case "FileTooLarge":
    case "MaxPartSize":
    case "MaxTotalSize":
      return tooLarge()
    case "MaxParts":
      return new InvalidRequest({
        code: "invalid_request",
        message: "The body has too many parts: send `file`, `purpose` and at most `workspace_id`"
      })
    case "MaxFieldSize":
      return new InvalidRequest({
        code: "parameter_invalid",
        message: "A form field is longer than 1024 bytes",
        ...(part !== undefined && FIELDS.has(part) ? { param: part } : {})
      })
    default:
      return new InvalidRequest({
        code: "invalid_request",
        message: "The multipart/form-data body could not be read: a malformed boundary, part header or encoding"
      })
  }
}

/** `request` as the HttpApi reads it: its multipart body already read (`multipart` answers it). */
const withParsedBody = (request: HttpServerRequest.HttpServerRequest, persisted: Multipart.Persisted) =>
  new Proxy(request, {
    get: (target, property) => (property === "multipart" ? Effect.succeed(persisted) : Reflect.get(target, property, target))
  })

/**
 * The upload's checks before its transaction: the text its idempotency fingerprint covers (the
 * purpose, the workspace when named, the part's name and type, and the bytes' size and SHA-256),
 * and the request the HttpApi is to read it from. The staged file lives as long as `scope`.
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
    if (declared !== undefined && Number(declared) === 0) return yield* missingFile()
    if (declared !== undefined && Number(declared) > MAX_BODY) {
      linger(request)
      return yield* tooLarge()
    }
    const fs = yield* FileSystem.FileSystem
    const persisted = yield* Effect.gen(function*() {
      const dir = yield* Effect.orDie(fs.makeTempDirectoryScoped({ prefix: "upload-" }))
      // each chunk waits for the cell's share of the node's bytes (issue 36), not behind other cells' uploads
      const pace = sharedBy(yield* Shares, "bytes")
      return yield* readMultipart(NodeHttpServerRequest.toIncomingMessage(request), request.headers, dir, LIMITS, pace)
    }).pipe(
      Effect.catchTag("MultipartRefused", (refused) => {
        linger(request)
        return Effect.fail(refusal(refused))
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
      if (key !== "file" && !FIELDS.has(key)) {
        return yield* new InvalidRequest({ code: "unknown_parameter", message: `Unknown parameter: ${key}`, param: key })
      }
    }
    const parts = persisted["file"]
    const file = Array.isArray(parts) && parts.length === 1 && isStagedFile(parts[0]) ? parts[0] : undefined
    if (file === undefined) return yield* missingFile()
    const { bytes, sha256 } = file
    if (bytes === 0) return yield* new InvalidRequest({ code: "file_empty", message: "The file is empty", param: "file" })
    const workspace = persisted["workspace_id"]
    const fingerprinted = JSON.stringify({
      purpose: persisted["purpose"] ?? null,
      // (only when named: the fingerprint of an upload without it stays what it was)
      ...(workspace === undefined ? {} : { workspace_id: workspace }),
      filename: file.name,
      content_type: file.contentType,
      bytes,
      sha256
    })
    return { body: fingerprinted, request: withParsedBody(request, persisted) }
  })
