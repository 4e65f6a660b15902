/**
 * A console's visitor over plain HTTP (fetch with a cookie jar, no browser), for the customer
 * console's tests (issue 38) and the operator console's (issue 39): its pages, the outbox's mail,
 * sign-up and TOTP enrolment with codes computed here.
 */
import { expect } from "@effect/vitest"
import { Clock, Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as OTPAuth from "otpauth"

import { TestApp } from "./App.js"

interface Page {
  readonly status: number
  readonly location: string | null
  readonly text: string
  readonly headers: Headers
}

/** A browser's worth of state: cookies (by name) and the last page's CSRF token. */
export const browser = () => {
  const jar = new Map<string, string>()
  let csrf = ""
  const send = (method: "GET" | "POST", url: string, fields?: Record<string, string>, withCsrf = true) =>
    Effect.flatMap(TestApp, (app) =>
      Effect.promise(async (): Promise<Page> => {
        const body = fields === undefined ? undefined : new URLSearchParams({ ...(withCsrf ? { csrf } : {}), ...fields }).toString()
        const res = await fetch(`${app.baseUrl}${url}`, {
          method,
          redirect: "manual",
          headers: {
            cookie: [...jar].map(([k, v]) => `${k}=${v}`).join("; "),
            ...(body !== undefined ? { "content-type": "application/x-www-form-urlencoded" } : {})
          },
          ...(body !== undefined ? { body } : {})
        })
        for (const line of res.headers.getSetCookie()) {
          const [pair] = line.split(";")
          const [name, ...value] = pair!.split("=")
          if (value.join("=") === "") jar.delete(name!)
          else jar.set(name!, value.join("="))
        }
        const text = await res.text()
        csrf = /name="csrf" value="([^"]+)"/.exec(text)?.[1] ?? csrf
        return { status: res.status, location: res.headers.get("location"), text, headers: res.headers }
      }))
  return {
    get: (url: string) => send("GET", url),
    post: (url: string, fields: Record<string, string> = {}) => send("POST", url, fields),
    postWithoutCsrf: (url: string, fields: Record<string, string> = {}) => send("POST", url, fields, false),
    cookie: (name: string) => jar.get(name)
  }
}
export type Browser = ReturnType<typeof browser>

/** The newest mail to `to` in the outbox, and the console link in it. */
export const mailTo = (to: string) =>
  Effect.map(TestApp, (app) => {
    const dir = path.join(app.settings.dataDir, "outbox")
    const mails = fs.readdirSync(dir).sort().map((f) => fs.readFileSync(path.join(dir, f), "utf8")).filter((m) => m.includes(`To: ${to}\n`))
    const mail = mails.at(-1)!
    const link = /http:\/\/[^/\s]+(\/console\/\S+)/.exec(mail)?.[1]
    return { mail, link: link!, count: mails.length }
  })

export const PASSWORD = "correct horse battery staple"

/** A verified, signed-in member without MFA. */
export const signedUp = (b: Browser, email: string) =>
  Effect.gen(function*() {
    yield* b.get("/console/sign-up")
    expect((yield* b.post("/console/sign-up", { email, password: PASSWORD })).status).toBe(200)
    const { link } = yield* mailTo(email)
    yield* b.get(link)
    const verified = yield* b.post("/console/verify", { token: new URL(link, "http://x").searchParams.get("token")! })
    expect(verified.status, verified.text).toBe(200)
    yield* b.get("/console/sign-in")
    const signedIn = yield* b.post("/console/sign-in", { email, password: PASSWORD })
    expect(signedIn.status, signedIn.text).toBe(303)
    return signedIn
  })

export const codeAt = (secret: string, at: number) => OTPAuth.TOTP.generate({ secret: OTPAuth.Secret.fromBase32(secret), timestamp: at })
export const now = Clock.currentTimeMillis

/** Enrols TOTP: the secret (as shown on the page) and the recovery codes. */
export const enrolled = (b: Browser, prefix = "/console") =>
  Effect.gen(function*() {
    const page = yield* b.get(`${prefix}/mfa/enrol`)
    expect(page.status, page.text).toBe(200)
    expect(page.text).toContain("data:image/png;base64,")
    const secret = /Key: <code>([A-Z2-7 ]+)<\/code>/.exec(page.text)![1]!.replace(/ /g, "")
    const wrong = yield* b.post(`${prefix}/mfa/enrol`, {
      code: String((Number(codeAt(secret, yield* now)) + 1) % 1_000_000).padStart(6, "0")
    })
    expect(wrong.status).toBe(400)
    expect(wrong.text).toContain("That code is not right")
    const done = yield* b.post(`${prefix}/mfa/enrol`, { code: codeAt(secret, yield* now) })
    expect(done.status, done.text).toBe(200)
    const codes = /<pre aria-label="Recovery codes">([^<]+)<\/pre>/.exec(done.text)![1]!.split("\n")
    expect(codes).toHaveLength(10)
    return { secret, codes }
  })

/** A conversation and a `Prefer: wait` run with the quickstart's ids and `key`, as the quickstart page shows them: both bodies. */
export const quickstartRun = async (base: string, tenantId: string, key: string, workspaceId: string, revisionId: string) => {
  const P = `${base}/v1/tenants/${tenantId}/environments/sandbox`
  const call = async (url: string, body: unknown, extra: Record<string, string> = {}) =>
    (await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": crypto.randomUUID(), ...extra },
      body: JSON.stringify(body)
    })).json() as Promise<any>
  const conversation = await call(`${P}/conversations`, { workspace_id: workspaceId, agent_revision_id: revisionId })
  const run = await call(`${P}/conversations/${conversation.data.id}/runs`, { input: [{ type: "text", text: "Hello" }] }, {
    prefer: "wait=10"
  })
  return { conversation, run }
}
