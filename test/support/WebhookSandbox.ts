/**
 * A sandbox for the webhook suites: a scripted agent (scriptedSandbox), a key with the webhook
 * scopes beside its manager key, helpers to register endpoints, run the agent and read
 * deliveries; and the app settings of these suites (127.0.0.1 allowlisted as a destination).
 */
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { type AppConfigShape, defaultToolConfig, defaultWebhookConfig, type WebhookConfig } from "../../src/Config/AppConfig.js"
import { createKey, request } from "./Client.js"
import { expectList, expectSingle } from "./Envelopes.js"
import { isTerminal, scriptedSandbox } from "./Sandboxes.js"
import { eventually } from "./Waiting.js"

export const WEBHOOK_SCOPES = ["webhooks:read", "webhooks:write"]

/** Probes until `check` holds, for up to about 15 s of real time (a loaded machine): the last value. */
export const waitFor = <A, E, R>(probe: Effect.Effect<A, E, R>, check: (a: A) => boolean) => eventually(probe, check, 300)

/** The agent answers at once. */
export const HELLO = [{ type: "text", text: "Hello {{input}}" }]

/**
 * The app's settings for these suites: receivers on 127.0.0.1 are allowed destinations; background
 * loops wake hourly, and the delivery worker's fallback poll daily (notifications and due times
 * wake it), so TestClock jumps of hours stay a few wake-ups. The cell's rate limit refills on the
 * test's Clock, which stands still while these suites poll the API (up to 300 probes of a
 * `waitFor`): its burst is raised so that polling a slow machine is not a 429 (these suites do not
 * test the limiter; Conventions.Envelopes does).
 */
export const webhookSettings = (webhooks: Partial<WebhookConfig> = {}): Partial<AppConfigShape> => ({
  tools: { ...defaultToolConfig, destinationAllowlist: "127.0.0.1/32", reconcileRetrySeconds: 86_400 },
  webhooks: { ...defaultWebhookConfig, pollSeconds: 86_400, ...webhooks },
  sweepIntervalSeconds: 3600,
  cellIdleTimeoutSeconds: 3600,
  rateLimit: { ratePerSecond: 60, burst: 100_000 }
})

export const webhookSandbox = (steps: ReadonlyArray<Record<string, unknown>> = HELLO) =>
  Effect.gen(function*() {
    const s = yield* scriptedSandbox(steps)
    const hooksKey = (yield* createKey(s.tenantId, WEBHOOK_SCOPES, "webhooks")).secret
    const hooks = (method: string, path: string, body?: unknown, idempotencyKey?: string) =>
      request(method, `${s.P}${path}`, {
        key: hooksKey,
        ...(body === undefined ? {} : { body }),
        ...(idempotencyKey === undefined ? {} : { idempotencyKey })
      })
    /** A 201 endpoint with its secret. */
    const createEndpoint = (url: string, event_types: ReadonlyArray<string>, extra: Record<string, unknown> = {}) =>
      Effect.map(hooks("POST", "/webhook-endpoints", { url, event_types, ...extra }), (r) => {
        const data = expectSingle(r, 201)
        expect(data.secret).toMatch(/^whsec_/)
        return data as { id: string; secret: string; url: string; event_types: Array<string> }
      })
    const delivery = (id: string) => Effect.map(hooks("GET", `/webhook-deliveries/${id}`), (r) => expectSingle(r))
    const deliveries = (query = "") => Effect.map(hooks("GET", `/webhook-deliveries${query}`), (r) => expectList(r).items)
    /** Starts a run in a new conversation: its id. */
    const startNewRun = (text = "there") =>
      Effect.gen(function*() {
        const conversation = yield* s.conversation()
        return expectSingle(yield* s.startRun(conversation.id, text), 202).id as string
      })
    /** A run that ended: its id. */
    const finishedRun = (text = "there") =>
      Effect.gen(function*() {
        const id = yield* startNewRun(text)
        expect(isTerminal((yield* waitFor(s.getRun(id), (r) => isTerminal(r.status))).status)).toBe(true)
        return id
      })
    return { ...s, hooksKey, hooks, createEndpoint, delivery, deliveries, startNewRun, finishedRun }
  })
