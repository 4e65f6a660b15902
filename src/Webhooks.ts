/**
 * Webhook endpoints and deliveries (D11, D18). An endpoint is a customer URL that passes the same
 * destination checks as a tool connection, the event types it wants, and a signing secret
 * (`whsec_...`, Standard Webhooks) shown once, stored encrypted (AES-256-GCM, bound to the
 * endpoint's id). Rotating the secret shows the new one once; for 24 h deliveries carry both
 * signatures. An environment has at most its `webhook_endpoints` quota of endpoints (D20: 16 by
 * default; 429 `quota_exceeded` past it). Deliveries are written with the event they announce (an
 * outbox: src/Webhooks/Repo.ts, migrations 0011 and 0024: the event stored once, its deliveries
 * referring to it) and sent by the delivery worker (src/Webhooks/Worker.ts), fairly across
 * environments; a replay is a new attempt of the same delivery, with the same `webhook-id`.
 */
import { randomBytes } from "node:crypto"

import { Clock, Duration, Effect } from "effect"

import { Secrets } from "./Crypto/Secrets.js"
import { dieOnSqlError } from "./Database/Defects.js"
import {
  type CreateWebhookEndpoint,
  SECRET_OVERLAP,
  type UpdateWebhookEndpoint,
  type WebhookEndpointWithSecret
} from "./Domain/Webhooks.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { makeId } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { setResponseHeader } from "./Kernel/UnitOfWork.js"
import { Destinations } from "./Outbound/Destinations.js"
import { quotaExceeded } from "./Quotas.js"
import { type EndpointRow, toDelivery, toEndpoint, WebhooksRepo } from "./Webhooks/Repo.js"

/** A signing secret as Standard Webhooks writes one: `whsec_` + base64 of 32 random bytes. */
const newSecret = () => `whsec_${randomBytes(32).toString("base64")}`

/** A type listed twice counts once. */
const distinct = <A>(values: ReadonlyArray<A>) => [...new Set(values)]

export interface DeliveryListParams extends Cursor.ListParams {
  readonly endpoint_id?: string | undefined
  readonly status?: "pending" | "succeeded" | "failed" | undefined
}

export class Webhooks extends Effect.Service<Webhooks>()("Webhooks", {
  effect: Effect.gen(function*() {
    const repo = yield* WebhooksRepo
    const secrets = yield* Secrets
    const destinations = yield* Destinations
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const found = (row: EndpointRow | undefined) => row ? Effect.succeed(row) : Effect.fail(notFound("webhook endpoint", "endpoint_id"))
    const withSecret = (row: EndpointRow, secret: string): WebhookEndpointWithSecret => ({ ...toEndpoint(row), secret })

    /** A new endpoint: refused with 429 `quota_exceeded` when the cell has `limit` (its `webhook_endpoints` quota) already. */
    const create = (p: Principal, body: CreateWebhookEndpoint, limit: number) =>
      Effect.gen(function*() {
        yield* destinations.checkRegistration(body.url, "url")
        const id = yield* makeId("we")
        const secret = newSecret()
        const at = yield* now
        const row = yield* repo.insertEndpoint({
          id,
          cell: p,
          url: body.url,
          description: body.description ?? null,
          eventTypes: distinct(body.event_types),
          secret: yield* secrets.encrypt(secret, id),
          keyId: p.keyId,
          at
        }, limit)
        if (row === undefined) return yield* quotaExceeded("webhook_endpoints", limit, at)
        return withSecret(row, secret)
      })

    const update = (p: CellRef, id: string, body: UpdateWebhookEndpoint) =>
      Effect.gen(function*() {
        if (Object.values(body).every((v) => v === undefined)) {
          return yield* invalid("parameter_missing", "Send at least one of url, event_types, enabled, description")
        }
        if (body.url !== undefined) yield* destinations.checkRegistration(body.url, "url")
        return toEndpoint(
          yield* found(
            yield* repo.updateEndpoint(p, id, {
              url: body.url,
              eventTypes: body.event_types === undefined ? undefined : distinct(body.event_types),
              enabled: body.enabled,
              description: body.description
            }, yield* now)
          )
        )
      })

    const rotateSecret = (p: CellRef, id: string) =>
      Effect.gen(function*() {
        const at = yield* now
        const secret = newSecret()
        const previousUntil = new Date(at.getTime() + Duration.toMillis(SECRET_OVERLAP))
        const row = yield* found(yield* repo.rotateSecret(p, id, yield* secrets.encrypt(secret, id), previousUntil, at))
        return withSecret(row, secret)
      })

    const remove = (p: CellRef, id: string) =>
      Effect.gen(function*() {
        if (!(yield* repo.deleteEndpoint(p, id))) return yield* notFound("webhook endpoint", "endpoint_id")
        return { id, object: "webhook_endpoint" as const, deleted: true as const }
      })

    const listDeliveries = (p: Principal, params: DeliveryListParams) =>
      Cursor.listPage(
        `webhook-deliveries:${params.endpoint_id ?? ""}:${params.status ?? ""}`,
        (t, e, after, limit) => repo.deliveries(t, e, after, limit, params),
        toDelivery
      )(p, params)

    const getDelivery = (p: CellRef, id: string) =>
      Effect.flatMap(
        repo.delivery(p, id),
        (row) => row ? Effect.succeed(toDelivery(row)) : Effect.fail(notFound("webhook delivery", "delivery_id"))
      )

    /** A new attempt of the same delivery (same `webhook-id`) as soon as possible: 202 with the delivery. */
    const replay = (p: CellRef, id: string) =>
      Effect.gen(function*() {
        const current = yield* repo.delivery(p, id)
        if (!current) return yield* notFound("webhook delivery", "delivery_id")
        const endpoint = yield* repo.endpoint(p, current.endpoint_id)
        if (endpoint && !endpoint.enabled) {
          return yield* conflict("webhook_endpoint_disabled", "This delivery's endpoint is disabled; enable it to replay")
        }
        const row = yield* repo.replay(p, id, yield* now)
        if (!row) return yield* conflict("webhook_delivery_in_flight", "An attempt of this delivery is under way; replay it once it ended")
        yield* setResponseHeader("location", `/v1/tenants/${p.tenantId}/environments/${p.environment}/webhook-deliveries/${id}`)
        return toDelivery(row)
      })

    return {
      create: (p: Gated<Principal>, body: CreateWebhookEndpoint, limit: number) => dieOnSqlError(create(p, body, limit)),
      get: (p: CellRef, id: string) => dieOnSqlError(Effect.map(Effect.flatMap(repo.endpoint(p, id), found), toEndpoint)),
      list: (p: Principal, params: Cursor.ListParams) =>
        dieOnSqlError(Cursor.listPage("webhook-endpoints", repo.endpoints, toEndpoint)(p, params)),
      update: (p: Gated<CellRef>, id: string, body: UpdateWebhookEndpoint) => dieOnSqlError(update(p, id, body)),
      remove: (p: Gated<CellRef>, id: string) => dieOnSqlError(remove(p, id)),
      rotateSecret: (p: CellRef, id: string) => dieOnSqlError(rotateSecret(p, id)),
      listDeliveries: (p: Principal, params: DeliveryListParams) => dieOnSqlError(listDeliveries(p, params)),
      getDelivery: (p: CellRef, id: string) => dieOnSqlError(getDelivery(p, id)),
      replay: (p: Gated<CellRef>, id: string) => dieOnSqlError(replay(p, id)),
      /** Every environment's deliveries waiting to be sent (the most first): the operators' backlog. */
      backlog: (limit = 50) => dieOnSqlError(repo.backlog(limit))
    } as const
  }),
  dependencies: [WebhooksRepo.Default, Secrets.Default, Destinations.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Webhooks (scripts/layers.ts) ----
export { WebhooksRepo } from "./Webhooks/Repo.js"
