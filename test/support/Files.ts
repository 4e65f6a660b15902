/** Multipart uploads and downloads of files (D13) over real HTTP, for tests. */
import { Effect } from "effect"

import { TestApp } from "./App.js"

export interface UploadOptions {
  readonly filename?: string
  readonly type?: string
  readonly purpose?: string
  readonly idempotencyKey?: string
  /** the `workspace_id` form field (D20) */
  readonly workspaceId?: string
}

/** POST P/files as multipart/form-data (fetch's FormData): the reply, parsed. */
export const upload = (P: string, key: string, bytes: Uint8Array | string, options: UploadOptions = {}) =>
  Effect.flatMap(TestApp, (app) =>
    Effect.promise(async () => {
      const form = new FormData()
      form.append("purpose", options.purpose ?? "run_input")
      if (options.workspaceId !== undefined) form.append("workspace_id", options.workspaceId)
      form.append("file", new Blob([bytes], { type: options.type ?? "application/octet-stream" }), options.filename ?? "data.bin")
      const res = await fetch(`${app.baseUrl}${P}/files`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${key}`,
          "idempotency-key": options.idempotencyKey ?? `up-${Math.random().toString(36).slice(2)}`
        },
        body: form
      })
      const text = await res.text()
      return { status: res.status, headers: res.headers, text, body: text === "" ? undefined : JSON.parse(text) }
    }))

/** GET a file's content: status, headers and the raw bytes. */
export const download = (P: string, key: string, id: string, headers: Record<string, string> = {}) =>
  Effect.flatMap(TestApp, (app) =>
    Effect.promise(async () => {
      const res = await fetch(`${app.baseUrl}${P}/files/${id}/content`, { headers: { authorization: `Bearer ${key}`, ...headers } })
      return { status: res.status, headers: res.headers, bytes: new Uint8Array(await res.arrayBuffer()) }
    }))
