/**
 * Webhook endpoints and their deliveries (D11, D18), and the life of a delivery as data: the event
 * types an endpoint may subscribe to, and the retry schedule of a failed attempt (an Effect
 * `Schedule`, which the delivery worker steps through one stored attempt at a time).
 */
import { Duration, Effect, Schedule, ScheduleDecision, ScheduleIntervals, Schema } from "effect"

import { strictBody } from "../Kernel/Body.js"
import { Timestamp } from "../Kernel/Ids.js"
import { RefString, SingleLine } from "../Kernel/Strings.js"
import { TERMINAL_EVENT_TYPES } from "./RunState.js"

/**
 * The run events (D8) a customer acts on: a run needs a human, ended (every terminal event of the
 * state machine), or got a reconciliation receipt. A database trigger on `run_events` (migration
 * 0011) lists the same types in its `WHEN`.
 */
export const WEBHOOK_RUN_EVENT_TYPES = ["run.requires_action", ...TERMINAL_EVENT_TYPES, "run.reconciled"] as const

/**
 * Every event type an endpoint may subscribe to (D18). Events of other resources are enqueued by
 * the transaction that changes them (`WebhooksRepo.enqueue`): an approval expiring, a deletion job
 * succeeding, a schedule disabled because its key was revoked (D15, `schedule.disabled`, in the
 * scheduler's transaction that disables it: src/Schedules/Repo.ts), an operator's decision on a
 * production request (D17, `production_request.decided`, to the sandbox's endpoints: src/ProductionRequests.ts).
 */
export const WEBHOOK_EVENT_TYPES = [
  ...WEBHOOK_RUN_EVENT_TYPES,
  "approval.expired",
  "deletion_job.succeeded",
  "schedule.disabled",
  "production_request.decided"
] as const

export const WebhookEventType = Schema.Literal(...WEBHOOK_EVENT_TYPES).annotations({
  identifier: "WebhookEventType",
  message: () => `must be one of: ${WEBHOOK_EVENT_TYPES.join(", ")}`
})
export type WebhookEventType = typeof WebhookEventType.Type

/** A delivery's state: retries pending, delivered (a 2xx), or given up after the last retry. */
export const DeliveryStatus = Schema.Literal("pending", "succeeded", "failed")
export type DeliveryStatus = typeof DeliveryStatus.Type

/** How long a receiver has to answer 2xx (D18): anything else, later, is a failed attempt. */
export const DELIVERY_TIMEOUT = Duration.seconds(15)

/** A delivery keeps its last this many attempts; `attempt_count` counts them all (D20). */
export const KEPT_ATTEMPTS = 50

/** While a rotated-out secret still signs deliveries, beside the new one (D18). */
export const SECRET_OVERLAP = Duration.hours(24)

/**
 * The retries of a delivery whose attempt failed (D11): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
 * after each failed attempt; after the last, the delivery is `failed`.
 */
export const RetrySchedule: Schedule.Schedule<Duration.Duration> = Schedule.fromDelays(
  Duration.seconds(5),
  Duration.minutes(5),
  Duration.minutes(30),
  Duration.hours(2),
  Duration.hours(5),
  Duration.hours(10),
  Duration.hours(10)
)

/** The schedule's delays, in order, read by stepping it (pure: no clock, no sleep). */
const delaysOf = <Out>(schedule: Schedule.Schedule<Out, unknown>): ReadonlyArray<Duration.Duration> =>
  Effect.runSync(Effect.gen(function*() {
    const delays: Array<Duration.Duration> = []
    let state = schedule.initial
    let now = 0
    while (delays.length < 1000) {
      const [next, , decision] = yield* schedule.step(now, undefined, state)
      if (ScheduleDecision.isDone(decision)) break
      const at = ScheduleIntervals.start(decision.intervals)
      delays.push(Duration.millis(at - now))
      now = at
      state = next
    }
    return delays
  }))

const RETRY_DELAYS = delaysOf(RetrySchedule)

/** The wait before the next attempt after `failures` failed attempts (1 = the first); none: give up. */
export const retryDelay = (failures: number): Duration.Duration | undefined => RETRY_DELAYS[failures - 1]

/** A destination URL: public `https://` (the destination guard decides), no fragment. */
const EndpointUrl = SingleLine.pipe(
  Schema.maxLength(2000),
  Schema.pattern(/^[^#]*$/, { message: () => "must not have a fragment", jsonSchema: { format: "uri", pattern: "^[^#]*$" } })
).annotations({
  description: "Public HTTPS URL (a query is kept, no fragment); localhost, private, link-local and metadata " +
    "destinations are refused (400 destination_refused)"
})

const EventTypes = Schema.Array(WebhookEventType).pipe(Schema.minItems(1), Schema.maxItems(50))
  .annotations({ description: "The event types delivered to this endpoint (a type listed twice counts once)" })

const Description = Schema.String.pipe(Schema.maxLength(500))

export const CreateWebhookEndpoint = strictBody(
  Schema.Struct({
    url: EndpointUrl,
    event_types: EventTypes,
    description: Schema.optional(Description)
  }).annotations({ identifier: "CreateWebhookEndpoint" })
)
export type CreateWebhookEndpoint = typeof CreateWebhookEndpoint.Type

export const UpdateWebhookEndpoint = strictBody(
  Schema.Struct({
    url: Schema.optional(EndpointUrl),
    event_types: Schema.optional(EventTypes),
    enabled: Schema.optional(Schema.Boolean.annotations({ description: "A disabled endpoint gets no new deliveries and sends none" })),
    description: Schema.optional(Schema.NullOr(Description))
  }).annotations({
    identifier: "UpdateWebhookEndpoint",
    description: "At least one field",
    // the rule the handler enforces (400 parameter_missing), stated in the document
    jsonSchema: { minProperties: 1 }
  })
)
export type UpdateWebhookEndpoint = typeof UpdateWebhookEndpoint.Type

export const WebhookEndpoint = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("webhook_endpoint"),
  url: Schema.String,
  event_types: Schema.Array(WebhookEventType),
  description: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  previous_secret_expires_at: Schema.NullOr(Timestamp).annotations({
    description: "After a rotation: until then deliveries carry a signature with the previous secret too"
  }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "WebhookEndpoint" })
export type WebhookEndpoint = typeof WebhookEndpoint.Type

/** An endpoint as created or as its secret was rotated: the only time `secret` is shown. */
export const WebhookEndpointWithSecret = Schema.Struct({
  ...WebhookEndpoint.fields,
  secret: Schema.NullOr(Schema.String).annotations({
    description: "The signing secret (`whsec_` + base64 of 32 random bytes, Standard Webhooks), shown once; null in an " +
      "idempotent replay"
  })
}).annotations({ identifier: "WebhookEndpointWithSecret" })
export type WebhookEndpointWithSecret = typeof WebhookEndpointWithSecret.Type

export const DeletedWebhookEndpoint = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("webhook_endpoint"),
  deleted: Schema.Literal(true)
}).annotations({ identifier: "DeletedWebhookEndpoint" })

export const WebhookAttempt = Schema.Struct({
  at: Timestamp,
  status_code: Schema.NullOr(Schema.Int).annotations({ description: "The receiver's HTTP status; null when none arrived" }),
  duration_ms: Schema.NullOr(Schema.Number).annotations({ description: "Null when the outcome is unknown" }),
  error: Schema.NullOr(Schema.String).annotations({ description: "Why the attempt failed; null for a 2xx" })
}).annotations({ identifier: "WebhookAttempt" })
export type WebhookAttempt = typeof WebhookAttempt.Type

export const WebhookDelivery = Schema.Struct({
  id: Schema.String.annotations({ description: "The message id: the body's `id` and the `webhook-id` header" }),
  object: Schema.Literal("webhook_delivery"),
  endpoint_id: Schema.String,
  event_id: Schema.String.annotations({ description: "The event announced: a run event id, or the event's own id" }),
  event_type: WebhookEventType,
  status: DeliveryStatus,
  attempts: Schema.Array(WebhookAttempt).annotations({
    description: `The last ${KEPT_ATTEMPTS} attempts, oldest first (older ones are dropped; \`attempt_count\` counts them all)`
  }),
  attempt_count: Schema.Int.annotations({ description: "Every attempt made, replays included" }),
  next_attempt_at: Schema.NullOr(Timestamp),
  created_at: Timestamp
}).annotations({ identifier: "WebhookDelivery" })
export type WebhookDelivery = typeof WebhookDelivery.Type

export const DeliveryListParams = Schema.Struct({
  endpoint_id: Schema.optional(RefString),
  status: Schema.optional(DeliveryStatus)
})

/** Where a delivery stands after an attempt, from its failed attempts so far and whether it was a replay. */
export const afterAttempt = (
  delivery: { readonly failures: number; readonly replay: boolean },
  ok: boolean,
  at: Date
): { readonly status: DeliveryStatus; readonly failures: number; readonly nextAttemptAt: Date | null } => {
  if (ok) return { status: "succeeded", failures: delivery.failures, nextAttemptAt: null }
  const failures = delivery.failures + 1
  // a replay of a finished delivery is one attempt, not retried
  const delay = delivery.replay ? undefined : retryDelay(failures)
  return delay === undefined
    ? { status: "failed", failures, nextAttemptAt: null }
    : { status: "pending", failures, nextAttemptAt: new Date(at.getTime() + Duration.toMillis(delay)) }
}
