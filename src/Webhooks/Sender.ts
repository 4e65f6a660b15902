/**
 * One attempt of a webhook delivery (D11, D18): `POST` the stored body to the endpoint's URL with
 * the Standard Webhooks v1 headers, `webhook-id` (the message id), `webhook-timestamp` (seconds)
 * and `webhook-signature` (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` per secret,
 * space-separated: the new and the previous secret during a rotation's overlap), signed with the
 * `standardwebhooks` package. It goes through the destination guard's dispatcher (the address each
 * socket connects to is checked; redirects are not followed). A 2xx within 15 s is success;
 * anything else (a redirect, 4xx, 5xx, no answer in time, a refused or broken connection) fails.
 */
import { Clock, Duration, Effect, Option } from "effect"
import { Webhook } from "standardwebhooks"
import { type Dispatcher, request } from "undici"

import { DELIVERY_TIMEOUT, type WebhookAttempt } from "../Domain/Webhooks.js"
import { toIso } from "../Kernel/Ids.js"
import { traced } from "../Kernel/Spans.js"

export interface Message {
  readonly url: string
  /** the message id: `webhook-id` */
  readonly id: string
  /** the exact bytes signed and sent */
  readonly body: string
  /** `whsec_...` secrets to sign with, the current one first */
  readonly secrets: ReadonlyArray<string>
}

/** The `webhook-signature` value: one `v1,<signature>` per secret, space-separated. */
export const signatures = (message: Message, at: Date): string =>
  message.secrets.map((secret) => new Webhook(secret).sign(message.id, at, message.body)).join(" ")

const describe = (e: any): string => {
  const code = e?.code ?? e?.cause?.code
  const text = e?.message ?? String(e)
  return (code === undefined ? text : `${code}: ${text}`).slice(0, 500)
}

/** Sends one attempt; never fails: the attempt says how it ended. */
export const send = (dispatcher: Dispatcher, message: Message): Effect.Effect<{ attempt: WebhookAttempt; ok: boolean }> =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const headers = {
      "content-type": "application/json",
      "user-agent": "agent-platform-webhooks/1",
      "webhook-id": message.id,
      "webhook-timestamp": String(Math.floor(started / 1000)),
      "webhook-signature": signatures(message, new Date(started))
    }
    const answer = yield* Effect.tryPromise({
      try: async (signal) => {
        const res = await request(message.url, { method: "POST", headers, body: message.body, dispatcher, signal })
        // Only the status matters: the rest of the answer is read and dropped (bounded) in the background.
        res.body.dump({ limit: 64 * 1024 }).catch(() => undefined)
        return { status: res.statusCode, location: res.headers["location"] }
      },
      catch: describe
    }).pipe(Effect.either, Effect.timeoutOption(DELIVERY_TIMEOUT))
    const duration = (yield* Clock.currentTimeMillis) - started
    const attempt = (status_code: number | null, error: string | null): WebhookAttempt => ({
      at: toIso(started),
      status_code,
      duration_ms: duration,
      error
    })
    if (Option.isNone(answer)) {
      return { ok: false, attempt: attempt(null, `no answer within ${Duration.toSeconds(DELIVERY_TIMEOUT)} s`) }
    }
    if (answer.value._tag === "Left") return { ok: false, attempt: attempt(null, answer.value.left) }
    const { location, status } = answer.value.right
    if (status >= 200 && status < 300) return { ok: true, attempt: attempt(status, null) }
    if (status >= 300 && status < 400) {
      return {
        ok: false,
        attempt: attempt(
          status,
          `a redirect (${status}${typeof location === "string" ? ` to ${location.slice(0, 200)}` : ""}) is not followed`
        )
      }
    }
    return { ok: false, attempt: attempt(status, `the endpoint answered ${status}`) }
  }).pipe(traced("Webhooks.send", { attributes: { "webhook.id": message.id } }))
