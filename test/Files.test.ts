/**
 * Files (D13): multipart upload within 25 MiB (exactly 25 MiB accepted, one byte more refused while
 * streaming, empty refused), bytes and SHA-256 in Postgres, metadata reads and lists, download
 * with ETag / If-None-Match (304) / one Range (206, 416), idempotent uploads (same bytes replay,
 * other bytes 409), delete, another tenant's file 404 like a missing one, and scopes. Files belong
 * to a workspace or to the environment (D20): the quickstart key reaches only its workspace's (read,
 * list, download, delete, run input), uploads into it always, and downloads carry `nosniff` and
 * `Content-Security-Policy: sandbox`.
 */
import { createHash, randomBytes } from "node:crypto"

import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

import { MAX_FILE_BYTES } from "../src/Domain/Files.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { download, upload } from "./support/Files.js"
import { AGENT_SCOPES, sandboxWithKey, scriptedSandbox } from "./support/Sandboxes.js"

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")

layer(makeTestApp(), { excludeTestServices: true, timeout: "120 seconds" })("files (D13)", (it) => {
  it.effect("round trip: random bytes over several chunks come back with the same SHA-256; 304, 206, 416; metadata and lists", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox() // the quickstart key: files:read and files:write
      const bytes = randomBytes(1_300_000)
      const created = yield* upload(sb.P, sb.key, bytes, { filename: "Résumé 2026 (final).pdf", type: "application/pdf" })
      const file = expectSingle(created, 201)
      expect(file).toMatchObject({
        object: "file",
        filename: "Résumé 2026 (final).pdf",
        bytes: bytes.length,
        content_type: "application/pdf",
        sha256: sha(bytes),
        purpose: "run_input",
        run_id: null
      })
      expect(file.id).toMatch(/^file_/)

      const got = yield* download(sb.P, sb.key, file.id)
      expect(got.status).toBe(200)
      expect(sha(got.bytes)).toBe(sha(bytes))
      expect(got.headers.get("content-type")).toBe("application/pdf")
      expect(got.headers.get("content-length")).toBe(String(bytes.length))
      expect(got.headers.get("etag")).toBe(`"${sha(bytes)}"`)
      expect(got.headers.get("content-disposition")).toBe(
        `attachment; filename="R_sum_ 2026 (final).pdf"; filename*=UTF-8''R%C3%A9sum%C3%A9%202026%20%28final%29.pdf`
      )

      const notModified = yield* download(sb.P, sb.key, file.id, { "if-none-match": `"${sha(bytes)}"` })
      expect(notModified.status).toBe(304)
      expect(notModified.bytes.length).toBe(0)
      expect((yield* download(sb.P, sb.key, file.id, { "if-none-match": `"other"` })).status).toBe(200)

      // a range across the first chunk boundary (512 KiB)
      const partial = yield* download(sb.P, sb.key, file.id, { range: "bytes=524000-525000" })
      expect(partial.status).toBe(206)
      expect(partial.headers.get("content-range")).toBe(`bytes 524000-525000/${bytes.length}`)
      expect(Buffer.from(partial.bytes).equals(bytes.subarray(524000, 525001))).toBe(true)
      const suffix = yield* download(sb.P, sb.key, file.id, { range: "bytes=-10" })
      expect(suffix.status).toBe(206)
      expect(Buffer.from(suffix.bytes).equals(bytes.subarray(bytes.length - 10))).toBe(true)
      const open = yield* download(sb.P, sb.key, file.id, { range: "bytes=1299990-" })
      expect(Buffer.from(open.bytes).equals(bytes.subarray(1299990))).toBe(true)
      const past = yield* download(sb.P, sb.key, file.id, { range: `bytes=${bytes.length}-` })
      expect(past.status).toBe(416)
      expect(past.headers.get("content-range")).toBe(`bytes */${bytes.length}`)
      expect(JSON.parse(Buffer.from(past.bytes).toString()).error.code).toBe("range_not_satisfiable")

      const read = expectSingle(yield* request("GET", `${sb.P}/files/${file.id}`, { key: sb.key }))
      expect(read).toEqual(file)
      const listed = yield* request("GET", `${sb.P}/files?purpose=run_input`, { key: sb.key })
      expect(listed.body.items.map((f: any) => f.id)).toEqual([file.id])
      expect((yield* request("GET", `${sb.P}/files?purpose=knowledge`, { key: sb.key })).body.items).toEqual([])

      // the bytes are in Postgres, chunked
      const sql = yield* SqlClient.SqlClient
      const chunks = yield* sql<{ n: number; total: string }>`
        SELECT count(*)::int AS n, sum(length(data))::text AS total FROM file_chunks WHERE file_id = ${file.id}`
      expect(chunks[0]).toEqual({ n: 3, total: String(bytes.length) })

      const deleted = expectSingle(yield* request("DELETE", `${sb.P}/files/${file.id}`, { key: sb.key }))
      expect(deleted).toEqual({ id: file.id, object: "file", deleted: true })
      expectErrorCode(yield* request("GET", `${sb.P}/files/${file.id}`, { key: sb.key }), 404, "resource_missing")
      expect((yield* download(sb.P, sb.key, file.id)).status).toBe(404)
      const left = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM file_chunks WHERE file_id = ${file.id}`
      expect(left[0]!.n).toBe(0)
    }))

  it.effect("exactly 25 MiB is accepted, one byte more is 400 file_too_large, empty is 400 file_empty", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const max = Buffer.alloc(MAX_FILE_BYTES, 7)
      const ok = expectSingle(yield* upload(sb.P, sb.key, max), 201)
      expect(ok.bytes).toBe(MAX_FILE_BYTES)
      expect(ok.sha256).toBe(sha(max))
      const over = yield* upload(sb.P, sb.key, Buffer.alloc(MAX_FILE_BYTES + 1, 7))
      expectErrorCode(over, 400, "file_too_large")
      expect(over.body.error.param).toBe("file")
      expectErrorCode(yield* upload(sb.P, sb.key, new Uint8Array(0)), 400, "file_empty")
      const listed = yield* request("GET", `${sb.P}/files`, { key: sb.key })
      expect(listed.body.items.map((f: any) => f.id)).toEqual([ok.id])
    }))

  it.effect("uploads are idempotent: same key and bytes replay, other bytes 409; other tenants' files are 404; scopes", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const bytes = randomBytes(1000)
      const first = expectSingle(yield* upload(sb.P, sb.key, bytes, { idempotencyKey: "same" }), 201)
      const again = yield* upload(sb.P, sb.key, bytes, { idempotencyKey: "same" })
      expect(again.status).toBe(201)
      expect(again.headers.get("idempotent-replayed")).toBe("true")
      expect(again.body.data).toEqual(first)
      const changed = yield* upload(sb.P, sb.key, randomBytes(1000), { idempotencyKey: "same" })
      expect(changed.status).toBe(409)

      const other = yield* provisionSandbox(undefined, "Globex")
      const missing = yield* request("GET", `${other.P}/files/file_doesnotexist`, { key: other.key })
      const foreign = yield* request("GET", `${other.P}/files/${first.id}`, { key: other.key })
      expect(foreign.status).toBe(404)
      expect({ ...foreign.body, request_id: null }).toEqual({ ...missing.body, request_id: null })
      expect((yield* download(other.P, other.key, first.id)).status).toBe(404)

      const reader = yield* createKey(sb.tenantId, ["files:read"], "reader")
      expectErrorCode(yield* upload(sb.P, reader.secret, bytes), 403, "missing_scope")
      expect((yield* download(sb.P, reader.secret, first.id)).status).toBe(200)

      const notMultipart = yield* request("POST", `${sb.P}/files`, { key: sb.key, body: { purpose: "run_input" } })
      expectErrorCode(notMultipart, 400, "unsupported_content_type")
      // a multipart body that ends before its closing boundary (empty, or junk) is refused, not left hanging
      for (
        const rawBody of ["", "junk without any boundary", "--zz\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nrun_input"]
      ) {
        const malformed = yield* request("POST", `${sb.P}/files`, {
          key: sb.key,
          rawBody,
          headers: { "content-type": "multipart/form-data; boundary=zz" }
        })
        expectErrorCode(malformed, 400)
      }
    }))

  it.effect("runs read files from their input and produce files: run.file.created, a run_output file with its run_id", () =>
    Effect.gen(function*() {
      const s = yield* scriptedSandbox([
        { type: "file", filename: "report.txt", content: "the report" },
        { type: "text", text: "echo: {{input}}" }
      ])
      const filesKey = (yield* createKey(s.tenantId, ["files:read", "files:write"], "files")).secret
      const notes = expectSingle(yield* upload(s.P, filesKey, "lorem from the file", { filename: "notes.txt", type: "text/plain" }), 201)
      const conversation = yield* s.conversation()
      const missing = yield* request("POST", `${s.P}/conversations/${conversation.id}/runs`, {
        key: s.key,
        body: { input: [{ type: "text", text: "read this" }, { type: "file", file_id: "file_missing" }] }
      })
      expectErrorCode(missing, 404, "resource_missing")
      expect(missing.body.error.param).toBe("input.1.file_id")

      const run = expectSingle(
        yield* request("POST", `${s.P}/conversations/${conversation.id}/runs`, {
          key: s.key,
          headers: { prefer: "wait=10" },
          body: { input: [{ type: "text", text: "read this" }, { type: "file", file_id: notes.id }] }
        })
      )
      expect(run.status).toBe("succeeded")
      expect(run.input).toEqual([{ type: "text", text: "read this" }, { type: "file", file_id: notes.id }])
      // the scripted model echoes the user message it received: the text, then the file as text
      expect(run.output[0].text).toContain("read this")
      expect(run.output[0].text).toContain("lorem from the file")

      const events = (yield* s.events(run.id)).items
      const created = events.filter((e) => e.type === "run.file.created")
      expect(created).toHaveLength(1)
      const types = events.map((e) => e.type)
      expect(types.indexOf("run.file.created")).toBeLessThan(types.indexOf("run.message"))
      expect(created[0].data).toMatchObject({ filename: "report.txt", bytes: 10 })
      const produced = expectSingle(yield* request("GET", `${s.P}/files/${created[0].data.file_id}`, { key: filesKey }))
      expect(produced).toMatchObject({
        purpose: "run_output",
        run_id: run.id,
        workspace_id: s.ws.id,
        filename: "report.txt",
        bytes: 10,
        content_type: "text/plain; charset=utf-8",
        sha256: sha(Buffer.from("the report"))
      })
      const content = yield* download(s.P, filesKey, produced.id)
      expect(Buffer.from(content.bytes).toString()).toBe("the report")
    }))

  it.effect("files belong to a workspace: the quickstart key reaches only its own (get, list, download, delete, run input)", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey([...AGENT_SCOPES, "files:read", "files:write"], "files")
      const quickstart = (yield* operator("GET", `/tenants/${sb.tenantId}/environments/sandbox/quickstart`)).body
      const other = expectSingle(yield* request("POST", `${sb.P}/workspaces`, { key: sb.manager, body: { name: "Other" } }), 201)
      // a key of the environment: a file of the environment, of another workspace, of the quickstart's
      const environmentFile = expectSingle(yield* upload(sb.P, sb.manager, "of the environment"), 201)
      // (the finding: the quickstart key read, downloaded and deleted every file of the environment)
      expectErrorCode(yield* request("GET", `${sb.P}/files/${environmentFile.id}`, { key: sb.key }), 404, "resource_missing")
      expect(environmentFile.workspace_id).toBeNull()
      const otherFile = expectSingle(yield* upload(sb.P, sb.manager, "of the other", { workspaceId: other.id }), 201)
      expect(otherFile.workspace_id).toBe(other.id)
      const unknown = yield* upload(sb.P, sb.manager, "x", { workspaceId: "ws_unknown" })
      expectErrorCode(unknown, 404, "resource_missing")
      expect(unknown.body.error.param).toBe("workspace_id")
      // the quickstart key uploads into its workspace, named or not; another is 403
      const mine = expectSingle(yield* upload(sb.P, sb.key, "of the quickstart"), 201)
      expect(mine.workspace_id).toBe(quickstart.workspace_id)
      const named = expectSingle(yield* upload(sb.P, sb.key, "named", { workspaceId: quickstart.workspace_id }), 201)
      expect(named.workspace_id).toBe(quickstart.workspace_id)
      expectErrorCode(yield* upload(sb.P, sb.key, "x", { workspaceId: other.id }), 403, "workspace_not_allowed")
      // the fingerprint covers the workspace: the same key and bytes naming another workspace is 409
      expectSingle(yield* upload(sb.P, sb.manager, "same", { idempotencyKey: "ws-fp" }), 201)
      expectErrorCode(yield* upload(sb.P, sb.manager, "same", { idempotencyKey: "ws-fp", workspaceId: other.id }), 409)

      // another workspace's file and the environment's are missing to it; its own are there
      for (const foreign of [otherFile, environmentFile]) {
        expectErrorCode(yield* request("GET", `${sb.P}/files/${foreign.id}`, { key: sb.key }), 404, "resource_missing")
        expect((yield* download(sb.P, sb.key, foreign.id)).status).toBe(404)
        expectErrorCode(yield* request("DELETE", `${sb.P}/files/${foreign.id}`, { key: sb.key }), 404, "resource_missing")
      }
      expect(expectSingle(yield* request("GET", `${sb.P}/files/${mine.id}`, { key: sb.key }))).toEqual(mine)
      expect(Buffer.from((yield* download(sb.P, sb.key, mine.id)).bytes).toString()).toBe("of the quickstart")
      const listed = expectList(yield* request("GET", `${sb.P}/files`, { key: sb.key })).items.map((f: any) => f.id)
      expect(listed).toEqual([named.id, mine.id])
      // a key of the environment sees them all, and filters by workspace
      const all = expectList(yield* request("GET", `${sb.P}/files`, { key: sb.manager })).items.map((f: any) => f.id)
      expect(all).toEqual(expect.arrayContaining([environmentFile.id, otherFile.id, mine.id, named.id]))
      const ofOther = expectList(yield* request("GET", `${sb.P}/files?workspace_id=${other.id}`, { key: sb.manager })).items
      expect(ofOther.map((f: any) => f.id)).toEqual([otherFile.id])

      // run input: another workspace's file is missing to it, its own is admitted
      const conversation = expectSingle(
        yield* request("POST", `${sb.P}/conversations`, {
          key: sb.key,
          body: { workspace_id: quickstart.workspace_id, agent_revision_id: quickstart.agent_revision_id }
        }),
        201
      )
      const runWith = (fileId: string) =>
        request("POST", `${sb.P}/conversations/${conversation.id}/runs`, {
          key: sb.key,
          body: { input: [{ type: "text", text: "read" }, { type: "file", file_id: fileId }] }
        })
      const refused = yield* runWith(otherFile.id)
      expectErrorCode(refused, 404, "resource_missing")
      expect(refused.body.error.param).toBe("input.1.file_id")
      expectErrorCode(yield* runWith(environmentFile.id), 404, "resource_missing")
      expectSingle(yield* runWith(mine.id), 202)

      // its own it may delete
      expectSingle(yield* request("DELETE", `${sb.P}/files/${named.id}`, { key: sb.key }))
      expectSingle(yield* request("GET", `${sb.P}/files/${otherFile.id}`, { key: sb.manager }))
    }))

  it.effect("downloads carry X-Content-Type-Options: nosniff and Content-Security-Policy: sandbox (200, 206, 304, 416)", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const file = expectSingle(yield* upload(sb.P, sb.key, "<script>alert(1)</script>", { type: "text/html", filename: "x.html" }), 201)
      for (
        const [headers, status] of [
          [{}, 200],
          [{ range: "bytes=0-3" }, 206],
          [{ "if-none-match": `"${file.sha256}"` }, 304],
          [{ range: "bytes=999-" }, 416]
        ] as const
      ) {
        const got = yield* download(sb.P, sb.key, file.id, headers)
        expect(got.status).toBe(status)
        expect(got.headers.get("x-content-type-options")).toBe("nosniff")
        expect(got.headers.get("content-security-policy")).toBe("sandbox")
      }
    }))
})
