/** Files (D13): upload, list, get, delete, download. */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, Multipart, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { DeletedFile, FileListParams, FileObject, MAX_FILE_BYTES, UPLOAD_LIMITS, UploadPurpose } from "../Domain/Files.js"
import { List, Single } from "../Kernel/Envelope.js"
import { RangeNotSatisfiableError, Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"
import { RefString } from "../Kernel/Strings.js"

const fileId = idParam("file_id")

/** What a workspace-bound key sees of files (D20). */
const WORKSPACE_BOUND = "A workspace-bound key (the quickstart key) reaches only its workspace's files: another's, or one of " +
  "the environment, is 404 as a missing one."

export const UploadFile = HttpApiSchema.Multipart(
  Schema.Struct({
    file: Multipart.SingleFileSchema.annotations({
      description: `The bytes, as one file part (its filename and Content-Type are kept): 1 to ${MAX_FILE_BYTES} bytes (25 MiB)`
    }),
    purpose: UploadPurpose,
    workspace_id: Schema.optional(RefString).annotations({
      description: "The workspace the file belongs to (its runs may use it); omitted: the environment's. Through a " +
        "workspace-bound key (the quickstart key) always that key's workspace"
    })
  }).annotations({ identifier: "UploadFile" }),
  UPLOAD_LIMITS
)

const FileBytes = HttpApiSchema.Uint8Array({ contentType: "application/octet-stream" }).annotations({
  description: "The file's bytes, served with its stored Content-Type"
})

const DOWNLOAD = "Streams the bytes with the stored `Content-Type`, `Content-Length`, `X-Content-Type-Options: nosniff`, " +
  "`Content-Security-Policy: sandbox` (a browser neither guesses the type nor runs what it holds), " +
  "`Content-Disposition: attachment; filename*=UTF-8''...` and `ETag` (the quoted SHA-256). `If-None-Match` with that " +
  "tag answers 304 with no body. One `Range: bytes=a-b` (or `a-`, `-n`) answers 206 with `Content-Range`; a range that " +
  "starts past the end answers 416 `range_not_satisfiable` (with `Content-Range: bytes */<size>`); several ranges, or " +
  "an `If-Range` that is not the current tag, get the whole file (200)."

export class FilesApi extends HttpApiGroup.make("files")
  .annotate(
    OpenApi.Description,
    "Files runs read (`run_input`, `knowledge`) and files runs produce (`run_output`). Bytes live in the platform's " +
      "database with their SHA-256."
  )
  .add(
    HttpApiEndpoint.post("uploadFile")`/v1/tenants/${tenantId}/environments/${environment}/files`
      .annotate(OpenApi.Summary, "Upload a file")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UploadFile)
      .addSuccess(Single(FileObject, 201))
      .annotate(
        OpenApi.Description,
        "`multipart/form-data` with `file` (one file part), `purpose` and optionally `workspace_id` (a workspace of " +
          "this environment, else 404 `param: workspace_id`; a workspace-bound key may name only its own, else 403 " +
          "`workspace_not_allowed`, and its files are always in its workspace). Exactly 25 MiB (26,214,400 bytes) is accepted; " +
          "one byte more is 400 `file_too_large`, checked while the body streams in; an empty file is 400 `file_empty`. " +
          "Idempotent like every mutation: the same Idempotency-Key with the same bytes, name, type and purpose replays " +
          "the answer; with different bytes it is 409 `idempotency_key_reused`. A file that does not fit the " +
          "environment's `storage_bytes` quota (the bytes of its files, run outputs included, and of its memory values) is " +
          "429 `quota_exceeded` (`Retry-After: 60`; room comes from deleted files or memory keys, or a raised limit). A " +
          "malformed multipart body (boundary, part header, encoding) is 400 `invalid_request`. This request body is the API's one " +
          "exception to JSON bodies."
      )
      .annotate(Refusals, [
        { code: "file_too_large", param: "file", when: "the file part holds more than 26,214,400 bytes" },
        { code: "file_empty", param: "file", when: "the file part holds no bytes" },
        {
          code: "invalid_filename",
          param: "file",
          when: "the part's filename is empty, longer than 255 characters, or holds a control character, `/` or `\\`"
        },
        { code: "parameter_missing", param: "file", when: "the body has no file part named `file`, or more than one" },
        { code: "unsupported_content_type", param: "Content-Type", when: "the body is not `multipart/form-data`" }
      ])
      .annotate(RequiredScopes, ["files:write"])
  )
  .add(
    HttpApiEndpoint.get("listFiles")`/v1/tenants/${tenantId}/environments/${environment}/files`
      .annotate(OpenApi.Summary, "List files")
      .setUrlParams(FileListParams)
      .addSuccess(List(FileObject))
      .annotate(
        OpenApi.Description,
        "Newest first; `purpose` and `workspace_id` filter. A workspace-bound key (the quickstart key) lists only its " +
          "workspace's files."
      )
      .annotate(RequiredScopes, ["files:read"])
  )
  .add(
    HttpApiEndpoint.get("getFile")`/v1/tenants/${tenantId}/environments/${environment}/files/${fileId}`
      .annotate(OpenApi.Summary, "Get a file")
      .addSuccess(Single(FileObject))
      .annotate(OpenApi.Description, WORKSPACE_BOUND)
      .annotate(RequiredScopes, ["files:read"])
  )
  .add(
    HttpApiEndpoint.del("deleteFile")`/v1/tenants/${tenantId}/environments/${environment}/files/${fileId}`
      .annotate(OpenApi.Summary, "Delete a file")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(DeletedFile))
      .annotate(
        OpenApi.Description,
        "Deletes the file and its bytes. Runs that already read it keep what they read; new runs naming it are refused. " +
          WORKSPACE_BOUND
      )
      .annotate(RequiredScopes, ["files:write"])
  )
  .add(
    HttpApiEndpoint.get("downloadFile")`/v1/tenants/${tenantId}/environments/${environment}/files/${fileId}/content`
      .annotate(OpenApi.Summary, "Download a file's content")
      .addSuccess(FileBytes)
      .addSuccess(FileBytes.annotations(HttpApiSchema.annotations({ status: 206 })))
      .addSuccess(HttpApiSchema.NoContent.annotations(HttpApiSchema.annotations({ status: 304 })))
      .addError(RangeNotSatisfiableError)
      .annotate(OpenApi.Description, `${DOWNLOAD} ${WORKSPACE_BOUND}`)
      .annotate(RequiredScopes, ["files:read"])
  )
  .middleware(ServiceKey)
{}
