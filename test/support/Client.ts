/**
 * A small HTTP client for tests: real requests over 127.0.0.1 with fetch, the operator path of a
 * new customer (a sandbox and its keys), and a reader of SSE streams.
 */
import { Effect } from "effect"
import { OPERATOR_TOKEN, TestApp } from "./App.js"

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly body: any
  readonly text: string
}

export interface RequestOptions {
  readonly key?: string | undefined
  readonly body?: unknown
  readonly rawBody?: string
  readonly headers?: Record<string, string>
  readonly idempotencyKey?: string | false
}

let counter = 0
const autoKey = () => `test-${Date.now()}-${++counter}-${Math.random().toString(36).slice(2)}`

export const request = (method: string, path: string, options: RequestOptions = {}) =>
  Effect.flatMap(TestApp, (app) =>
    Effect.promise(async (): Promise<Reply> => {
      const headers: Record<string, string> = { ...options.headers }
      if (options.key !== undefined) headers["authorization"] = `Bearer ${options.key}`
      let body: string | undefined
      if (options.rawBody !== undefined) body = options.rawBody
      else if (options.body !== undefined) body = JSON.stringify(options.body)
      if (body !== undefined && !headers["content-type"]) headers["content-type"] = "application/json"
      const mutation = method !== "GET" && method !== "HEAD"
      if (mutation && options.idempotencyKey !== false && path.startsWith("/v1/")) {
        headers["idempotency-key"] = options.idempotencyKey ?? autoKey()
      }
      const res = await fetch(`${app.baseUrl}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) })
      const text = await res.text()
      let parsed: any = undefined
      try {
        parsed = text === "" ? undefined : JSON.parse(text)
      } catch {
        parsed = undefined
      }
      return { status: res.status, headers: res.headers, body: parsed, text }
    }))

export const operator = (method: string, path: string, body?: unknown) =>
  request(method, `/operator/v1${path}`, { key: OPERATOR_TOKEN, ...(body !== undefined ? { body } : {}) })

export interface Sandbox {
  readonly tenantId: string
  readonly environment: "sandbox"
  /** P of the contract */
  readonly P: string
  readonly key: string
  readonly keyId: string
}

/** The operator path of a new customer: apply, approve, first key (optionally with scopes). */
export const provisionSandbox = (scopes?: ReadonlyArray<string>, organization = "Acme") =>
  Effect.gen(function*() {
    const app = yield* operator("POST", "/pilot-applications", { organization_name: organization, contact_email: "ops@acme.test" })
    if (app.status !== 201) throw new Error(`pilot application failed: ${app.text}`)
    const approved = yield* operator("POST", `/pilot-applications/${app.body.id}/approve`)
    if (approved.status !== 200) throw new Error(`approve failed: ${approved.text}`)
    const tenantId: string = approved.body.tenant_id
    const key = yield* createKey(tenantId, scopes)
    return { tenantId, environment: "sandbox" as const, P: `/v1/tenants/${tenantId}/environments/sandbox`, key: key.secret, keyId: key.id }
  })

export const createKey = (tenantId: string, scopes?: ReadonlyArray<string>, name = "key") =>
  Effect.map(
    operator("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, scopes ? { name, scopes } : { name }),
    (r) => {
      if (r.status !== 201) throw new Error(`key creation failed: ${r.status} ${r.text}`)
      return r.body as { id: string; secret: string; scopes: Array<string> }
    }
  )

/** The operator's settings PATCH (D20) of a tenant's sandbox, e.g. `{ schedule_min_interval_seconds: 1 }`: the settings. */
export const setSettings = (tenantId: string, body: Record<string, unknown>) =>
  Effect.map(operator("PATCH", `/tenants/${tenantId}/environments/sandbox/settings`, body), (r) => {
    if (r.status !== 200) throw new Error(`settings change failed: ${r.status} ${r.text}`)
    return r.body as Record<string, unknown>
  })

/** Reads an SSE response until it ends (or `max` events), returning the parsed frames. */
export const readSse = (url: string, headers: Record<string, string>, max = 1000) =>
  Effect.promise(async () => {
    const res = await fetch(url, { headers })
    const frames: Array<{ id?: string; event?: string; data?: any }> = []
    let comments = 0
    if (res.status !== 200) return { status: res.status, headers: res.headers, frames, comments, body: await res.text() }
    const reader = res.body!.getReader()
    const decoder = new TextDecoder()
    let buffer = ""
    while (frames.length < max) {
      const { done, value } = await reader.read()
      if (done) break
      buffer += decoder.decode(value, { stream: true })
      let cut: number
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut)
        buffer = buffer.slice(cut + 2)
        const frame: { id?: string; event?: string; data?: any } = {}
        let isComment = true
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue
          isComment = false
          const [field, ...rest] = line.split(":")
          const value = rest.join(":").replace(/^ /, "")
          if (field === "id") frame.id = value
          if (field === "event") frame.event = value
          if (field === "data") frame.data = JSON.parse(value)
        }
        if (isComment) comments++
        else frames.push(frame)
      }
    }
    await reader.cancel().catch(() => undefined)
    return { status: res.status, headers: res.headers, frames, comments, body: "" }
  })
