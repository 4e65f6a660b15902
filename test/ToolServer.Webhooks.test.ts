/**
 * The SDK's webhook verifier (src/ToolServer `verifyWebhook`, D11) on its own: deliveries signed as
 * the platform signs them (`standardwebhooks`), with one signature or two (a rotation's overlap),
 * verify with either secret; a changed body, another secret, a missing header or an old timestamp is
 * refused; header names in any case, the raw body as bytes or text.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { verifyWebhook } from "../src/ToolServer/index.js"

const secret = () => `whsec_${randomBytes(32).toString("base64")}`
const event = {
  id: "msg_1",
  type: "run.succeeded",
  created_at: "2025-01-01T00:00:00.000Z",
  tenant_id: "ten_1",
  environment: "sandbox",
  data: { id: "evt_1" }
}

/** A delivery signed now with each of `secrets`, as the platform sends it. */
const delivery = (secrets: ReadonlyArray<string>, at = new Date(), body = JSON.stringify(event)) => ({
  body,
  headers: {
    "webhook-id": "msg_1",
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": secrets.map((s) => new Webhook(s).sign("msg_1", at, body)).join(" ")
  }
})

const rejected = (request: Parameters<typeof verifyWebhook>[0]) =>
  Effect.map(Effect.flip(verifyWebhook(request)), (e) => {
    expect(e._tag).toBe("WebhookRejected")
    expect(e.status).toBe(400)
    return e.message
  })

describe("tool server SDK: webhook verification (D11)", () => {
  it.effect("a signed delivery verifies: the event; raw bytes or text; header names in any case", () =>
    Effect.gen(function*() {
      const key = secret()
      const d = delivery([key])
      expect(yield* verifyWebhook({ secrets: key, headers: d.headers, rawBody: d.body })).toEqual(event)
      const shouting = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k.toUpperCase(), [v]]))
      expect(yield* verifyWebhook({ secrets: [key], headers: shouting, rawBody: new TextEncoder().encode(d.body) })).toEqual(event)
    }))

  it.effect("during a rotation's overlap both signatures are sent: either secret verifies; a receiver may hold both", () =>
    Effect.gen(function*() {
      const [old, fresh] = [secret(), secret()]
      const d = delivery([fresh, old])
      for (const secrets of [old, fresh, [old, fresh], [secret(), fresh]]) {
        expect((yield* verifyWebhook({ secrets, headers: d.headers, rawBody: d.body })).id).toBe("msg_1")
      }
      expect(yield* rejected({ secrets: secret(), headers: d.headers, rawBody: d.body })).toContain("No matching signature")
    }))

  it.effect("refused: a changed body, another secret, a missing header, a timestamp 10 minutes old, no secret", () =>
    Effect.gen(function*() {
      const key = secret()
      const d = delivery([key])
      expect(yield* rejected({ secrets: key, headers: d.headers, rawBody: d.body.replace("ten_1", "ten_2") })).toContain("No matching")
      expect(yield* rejected({ secrets: secret(), headers: d.headers, rawBody: d.body })).toContain("No matching")
      const { "webhook-id": _, ...noId } = d.headers
      expect(yield* rejected({ secrets: key, headers: noId, rawBody: d.body })).toContain("Missing required headers")
      const stale = delivery([key], new Date(Date.now() - 10 * 60 * 1000))
      expect(yield* rejected({ secrets: key, headers: stale.headers, rawBody: stale.body })).toContain("too old")
      expect(yield* rejected({ secrets: [], headers: d.headers, rawBody: d.body })).toBe("no secret to verify with")
    }))
})
