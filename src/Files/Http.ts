/** Handlers of files (D13). */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Files } from "../Files.js"
import { inCell } from "../Kernel/Policy.js"

export const FilesLive = HttpApiBuilder.group(Api, "files", (handlers) =>
  Effect.map(Files, (files) =>
    handlers
      .handle("uploadFile", inCell((p, { payload }) => files.upload(p, payload)))
      .handle("listFiles", inCell((p, { urlParams }) => files.list(p, urlParams)))
      .handle("getFile", inCell((p, { path }) => files.get(p, path.file_id)))
      .handle("deleteFile", inCell((p, { path }) => files.remove(p, path.file_id)))
      .handle(
        "downloadFile",
        inCell((p, { path }) =>
          Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => files.content(p, path.file_id, request.headers))
        )
      )))
