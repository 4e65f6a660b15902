/**
 * No multipart input can stop the node (D20, issue 35): the service runs as a child process (so a
 * throw outside any Effect code would end it) and is sent uploads whose part headers, boundaries
 * and encodings are broken. The exact finding (`filename*=UTF-8''%E0%A4%A`, which made the parser
 * throw `URIError` from inside the request stream's pipe) is 400 `invalid_request`; then, as a
 * property, mutations of a valid upload (bad percent-encodings and charsets in `filename*`,
 * boundaries, encodings, truncation, huge headers, missing line breaks, flipped bytes) are each
 * answered with the D3 envelope, 400, or 201 where the mutation left a valid upload; and the
 * process serves `GET /healthz` afterwards.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Exit, FastCheck as fc, Scope } from "effect"
import { randomUUID } from "node:crypto"

import { OPERATOR_TOKEN } from "./support/App.js"
import { freshDatabase } from "./support/Database.js"
import { isRunning } from "./support/Processes.js"
import { type ChildServer, killAllChildren, startChild } from "./support/Server.js"

interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: any
}

const send = async (url: string, init: RequestInit): Promise<Answer> => {
  const res = await fetch(url, init)
  const text = await res.text()
  let json: any = undefined
  try {
    json = text === "" ? undefined : JSON.parse(text)
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, text, json }
}

let scope: Scope.CloseableScope
let server: ChildServer
let P: string
let key: string

beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  const db = await Effect.runPromise(Scope.extend(freshDatabase, scope))
  server = await startChild(db.url, { OPERATOR_TOKEN, CELL_RATE_LIMIT_RPS: "100000", CELL_RATE_LIMIT_BURST: "100000" })
  const operator = (path: string, body?: unknown) =>
    send(`${server.baseUrl}/operator/v1${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(body ?? {})
    })
  const pilot = await operator("/pilot-applications", { organization_name: "Multipart Co", contact_email: "ops@mp.test" })
  const approved = await operator(`/pilot-applications/${pilot.json.id}/approve`)
  const tenantId: string = approved.json.tenant_id
  // the first (quickstart) key: it has files:write
  key = (await operator(`/tenants/${tenantId}/environments/sandbox/api-keys`, { name: "first" })).json.secret
  P = `/v1/tenants/${tenantId}/environments/sandbox`
}, 120_000)

afterAll(async () => {
  await killAllChildren()
  await Effect.runPromise(Scope.close(scope, Exit.void))
})

/** POST P/files with this raw body and Content-Type. */
const uploadRaw = (body: Buffer, contentType: string) =>
  send(`${server.baseUrl}${P}/files`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "idempotency-key": randomUUID(), "content-type": contentType },
    body
  })

/** The D3 envelope: `{error: {type, code, message, param?}, request_id}` and nothing else, its id the header's. */
const expectEnvelope = (answer: Answer, status: number) => {
  expect(answer.status, answer.text).toBe(status)
  expect(Object.keys(answer.json).sort()).toEqual(["error", "request_id"])
  expect(answer.json.request_id).toBe(answer.headers.get("x-request-id"))
  const { code, message, param, type, ...rest } = answer.json.error
  expect(rest).toEqual({})
  expect(typeof code).toBe("string")
  expect(typeof message).toBe("string")
  expect(param === undefined || typeof param === "string").toBe(true)
  expect(type).toBe(status === 400 ? "invalid_request" : type)
}

const alive = async () => {
  expect(isRunning(server.pid)).toBe(true)
  const health = await send(`${server.baseUrl}/healthz`, {})
  expect(health.status).toBe(200)
}

const CRLF = "\r\n"
const BOUNDARY = "----mp0123456789"
const TYPE = `multipart/form-data; boundary=${BOUNDARY}`

/** A valid upload's parts (the file's part headers given whole), with this boundary. */
const body = (fileHeaders: string, content = "hello multipart", boundary = BOUNDARY) =>
  Buffer.from(
    `--${boundary}${CRLF}Content-Disposition: form-data; name="purpose"${CRLF}${CRLF}run_input${CRLF}` +
      `--${boundary}${CRLF}${fileHeaders}${CRLF}${CRLF}${content}${CRLF}--${boundary}--${CRLF}`,
    "latin1"
  )
const disposition = (filenameParams: string) =>
  `Content-Disposition: form-data; name="file"; ${filenameParams}${CRLF}Content-Type: text/plain`

describe("multipart input cannot stop the node (D20)", () => {
  it("the finding: filename*=UTF-8''%E0%A4%A is 400 invalid_request, and the service goes on serving", async () => {
    const answer = await uploadRaw(body(disposition(`filename*=UTF-8''%E0%A4%A`)), TYPE)
    expectEnvelope(answer, 400)
    expect(answer.json.error.code).toBe("invalid_request")
    await alive()
    // and a valid upload right after it is stored
    const ok = await uploadRaw(body(disposition(`filename*=UTF-8''r%C3%A9sum%C3%A9.txt`)), TYPE)
    expect(ok.status, ok.text).toBe(201)
    expect(ok.json.data).toMatchObject({ filename: "résumé.txt", bytes: 15, content_type: "text/plain" })
  }, 60_000)

  it("mutated multipart bodies: every answer is a D3 envelope 400 (or 201 for a still valid upload); the process serves on", async () => {
    const badPercent = fc.constantFrom("%E0%A4%A", "%", "%Z", "%ZZ", "%C0%AF", "%FF", "%ED%A0%80", "%E0%80", "a%2", "%%41")
    const charset = fc.constantFrom("UTF-8", "utf-8", "ISO-8859-1", "x-bogus", "", "UTF-16")
    const filename = fc.oneof(
      // a bad percent-encoding anywhere in filename*: always refused
      fc.tuple(charset, fc.string({ maxLength: 8 }).map(encodeURIComponent), badPercent, fc.boolean()).map(
        ([cs, before, bad, quoted]) => ({
          params: `filename*=${quoted ? `"${cs}''${before}${bad}"` : `${cs}''${before}${bad}`}`,
          valid: false
        })
      ),
      // well-formed or oddly formed, in various charsets: either answer
      fc.tuple(charset, fc.string({ minLength: 1, maxLength: 12 }), fc.constantFrom("''", "'en'", "'", "")).map(
        ([cs, name, sep]) => ({ params: `filename="x.txt"; filename*=${cs}${sep}${encodeURIComponent(name)}`, valid: undefined })
      )
    )
    const mutations: Record<string, fc.Arbitrary<{ body: Buffer; contentType: string; valid?: boolean | undefined }>> = {
      filename: filename.map(({ params, valid }) => ({ body: body(disposition(params)), contentType: TYPE, valid })),
      boundary: fc.constantFrom(
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
        "multipart/form-data; boundary=other",
        `multipart/form-data; boundary="${BOUNDARY}"`,
        `multipart/form-data; boundary=${BOUNDARY}; boundary=x`,
        `multipart/form-data; boundary=${"b".repeat(2000)}`,
        `multipart/form-data;boundary=${BOUNDARY};charset=utf-8`,
        `multipart/form-data; charset=bogus; boundary=${BOUNDARY}`
      ).map((contentType) => ({ body: body(disposition(`filename="a.txt"`)), contentType })),
      encoding: fc.constantFrom(
        `${disposition(`filename="a.txt"`)}${CRLF}Content-Transfer-Encoding: base64`,
        `${disposition(`filename="a.txt"`)}; charset=x-unknown`,
        `Content-Disposition: form-data; name="file"; filename="\u00ff\u00fe.txt"`,
        `Content-Disposition: form-data; name="file"; filename="a\u0000b.txt"`,
        `Content-Disposition: form-data; filename="a.txt"`,
        `Content-Disposition: attachment; name="file"; filename="a.txt"`,
        `Content-Disposition: form-data; name="file"; filename*=UTF-8''`,
        `Content-Disposition: form-data; name="file"; filename*=UTF-8''a''b`,
        `Content-Disposition: form-data; name=file; filename=a.txt`,
        `Content-Type: text/plain`
      ).map((headers) => ({ body: body(headers), contentType: TYPE })),
      "huge headers": fc.constantFrom(
        `${disposition(`filename="a.txt"`)}${CRLF}X-Big: ${"v".repeat(20_000)}`,
        `${disposition(`filename="a.txt"`)}${Array.from({ length: 150 }, (_, i) => `${CRLF}X-H${i}: 1`).join("")}`,
        disposition(`filename="${"n".repeat(5_000)}"`),
        disposition(`filename*=UTF-8''${"%41".repeat(4_000)}`)
      ).map((headers) => ({ body: body(headers), contentType: TYPE })),
      truncated: fc.nat().map((n) => {
        const whole = body(disposition(`filename="a.txt"`))
        // (all but the closing boundary's `--` and line break: a cut before those ends it early)
        return { body: whole.subarray(0, n % (whole.length - 2)), contentType: TYPE, valid: false }
      }),
      "missing CRLF": fc.nat().map((n) => {
        const whole = body(disposition(`filename="a.txt"`)).toString("latin1")
        const at = [...whole.matchAll(/\r\n/g)].map((m) => m.index)
        const cut = at[n % at.length]!
        return { body: Buffer.from(whole.slice(0, cut) + whole.slice(cut + 2), "latin1"), contentType: TYPE }
      }),
      "flipped bytes": fc.tuple(fc.nat(), fc.nat(), fc.integer({ min: 0, max: 255 })).map(([a, b, byte]) => {
        const whole = Buffer.from(body(disposition(`filename*=UTF-8''f%C3%BC.txt`)))
        whole[a % whole.length] = byte
        whole[b % whole.length] = byte ^ 0x80
        return { body: whole, contentType: TYPE }
      }),
      junk: fc.uint8Array({ maxLength: 400 }).map((junk) => ({ body: Buffer.from(junk), contentType: TYPE, valid: false }))
    }
    let cases = 0
    await fc.assert(
      fc.asyncProperty(fc.oneof(...Object.values(mutations)), async (mutated) => {
        cases++
        const answer = await uploadRaw(mutated.body, mutated.contentType)
        if (answer.status === 201 && mutated.valid !== false) {
          expect(answer.json.data.object).toBe("file")
          return
        }
        expectEnvelope(answer, 400)
        expect(mutated.valid === true).toBe(false)
      }),
      { numRuns: 200 }
    )
    expect(cases).toBeGreaterThanOrEqual(200)
    await alive()
  }, 60_000)
})
