/** Handlers of files (D13). */
import { HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Files } from "../Files.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Quotas } from "../Quotas.js"

export const FilesLive = HttpGroup.group(
  Api,
  "files",
  (handlers) =>
    Effect.map(Effect.all([Files, Quotas]), ([files, quotas]) =>
      handlers
        .handle(
          "uploadFile",
          inCell((p, { payload }) => Effect.flatMap(quotas.limitsOf(p), (limits) => files.upload(p, payload, limits.storage_bytes)))
        )
        .handle("listFiles", inCell((p, { urlParams }) => files.list(p, urlParams)))
        .handle("getFile", inCell((p, { path }) => files.get(p, path.file_id)))
        .handle("deleteFile", inCell((p, { path }) => files.remove(p, path.file_id)))
        .handle(
          "downloadFile",
          inCell((p, { path }) =>
            Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => files.content(p, path.file_id, request.headers))
          )
        ))
)
