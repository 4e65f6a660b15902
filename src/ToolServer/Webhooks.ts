/**
 * Verifying the platform's webhook deliveries (D11, D18): the customer's side, a thin wrapper over
 * the `standardwebhooks` package. A delivery is accepted when one of its `webhook-signature`
 * signatures is the HMAC-SHA256, with one of the endpoint's secrets, of
 * `{webhook-id}.{webhook-timestamp}.{raw body}`, and its timestamp is within 5 minutes of this
 * machine's clock (the package's tolerance, against replays).
 *
 * Pass the raw body exactly as received (not re-serialized JSON). During a rotation of the
 * endpoint's secret the platform signs with both the new and the previous secret for 24 h, so a
 * receiver may switch to the new secret at once; `secrets` takes several for a receiver that rolls
 * its own configuration over. Deduplicate by `webhook-id` (the body's `id`): a delivery can arrive
 * again after an attempt whose outcome the platform could not know.
 */
import { Effect, Schema } from "effect"
import { Webhook } from "standardwebhooks"

/** A delivery's body (D11): the event, `data` being the run event (D8) or the resource it is about. */
export interface WebhookEvent {
  /** the message id, equal to the `webhook-id` header */
  readonly id: string
  readonly type: string
  readonly created_at: string
  readonly tenant_id: string
  readonly environment: string
  readonly data: Record<string, unknown>
}

/** Why a delivery was refused; answer with `status` (400), and the platform retries it. */
export class WebhookRejected extends Schema.TaggedError<WebhookRejected>()("WebhookRejected", {
  message: Schema.String,
  status: Schema.Number
}) {}

export interface WebhookRequest {
  /** the endpoint's signing secret (`whsec_...`), or several (the current one first) */
  readonly secrets: string | ReadonlyArray<string>
  /** header names in any case */
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  /** the body exactly as received */
  readonly rawBody: Uint8Array | string
}

const WEBHOOK_HEADERS = ["webhook-id", "webhook-timestamp", "webhook-signature"] as const

/** Verifies one delivery: its event, or `WebhookRejected` (the last reason `standardwebhooks` gave). */
export const verifyWebhook = (request: WebhookRequest): Effect.Effect<WebhookEvent, WebhookRejected> =>
  Effect.suspend(() => {
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(request.headers)) {
      const key = name.toLowerCase()
      const first = typeof value === "string" ? value : value?.[0]
      if ((WEBHOOK_HEADERS as ReadonlyArray<string>).includes(key) && first !== undefined) headers[key] = first
    }
    const body = typeof request.rawBody === "string" ? request.rawBody : Buffer.from(request.rawBody).toString("utf8")
    const secrets = typeof request.secrets === "string" ? [request.secrets] : request.secrets
    let reason = "no secret to verify with"
    for (const secret of secrets) {
      try {
        return Effect.succeed(new Webhook(secret).verify(body, headers) as WebhookEvent)
      } catch (e) {
        reason = e instanceof Error ? e.message : String(e)
      }
    }
    return Effect.fail(new WebhookRejected({ message: reason, status: 400 }))
  }).pipe(Effect.withSpan("ToolServer.verifyWebhook"))
