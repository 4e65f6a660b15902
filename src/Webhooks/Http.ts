/** Handlers of webhook endpoints and deliveries (D11, D18). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Quotas } from "../Quotas.js"
import { Webhooks } from "../Webhooks.js"

export const WebhookEndpointsLive = HttpGroup.group(
  Api,
  "webhook-endpoints",
  (handlers) =>
    Effect.map(Effect.all([Webhooks, Quotas]), ([webhooks, quotas]) =>
      handlers
        .handle(
          "createWebhookEndpoint",
          inCell((p, { payload }) => Effect.flatMap(quotas.limitsOf(p), (limits) => webhooks.create(p, payload, limits.webhook_endpoints)))
        )
        .handle("listWebhookEndpoints", inCell((p, { urlParams }) => webhooks.list(p, urlParams)))
        .handle("getWebhookEndpoint", inCell((p, { path }) => webhooks.get(p, path.endpoint_id)))
        .handle("updateWebhookEndpoint", inCell((p, { path, payload }) => webhooks.update(p, path.endpoint_id, payload)))
        .handle("deleteWebhookEndpoint", inCell((p, { path }) => webhooks.remove(p, path.endpoint_id)))
        .handle("rotateWebhookEndpointSecret", inCell((p, { path }) => webhooks.rotateSecret(p, path.endpoint_id))))
)

export const WebhookDeliveriesLive = HttpGroup.group(
  Api,
  "webhook-deliveries",
  (handlers) =>
    Effect.map(Webhooks, (webhooks) =>
      handlers
        .handle("listWebhookDeliveries", inCell((p, { urlParams }) => webhooks.listDeliveries(p, urlParams)))
        .handle("getWebhookDelivery", inCell((p, { path }) => webhooks.getDelivery(p, path.delivery_id)))
        .handle("replayWebhookDelivery", inCell((p, { path }) => webhooks.replay(p, path.delivery_id))))
)
