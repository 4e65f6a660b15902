/** Webhook endpoints and deliveries (D11, D18). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import {
  CreateWebhookEndpoint,
  DeletedWebhookEndpoint,
  DeliveryListParams,
  UpdateWebhookEndpoint,
  WebhookDelivery,
  WebhookEndpoint,
  WebhookEndpointWithSecret
} from "../Domain/Webhooks.js"
import { ListParams } from "../Kernel/Cursor.js"
import { Accepted, List, Single } from "../Kernel/Envelope.js"
import { type Refusal, Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const endpointId = idParam("endpoint_id")
const deliveryId = idParam("delivery_id")

const destinationRefused: Refusal = {
  code: "destination_refused",
  param: "url",
  when:
    "`url` is not a public `https://` destination: a local, private, link-local or metadata host or address, a name that does not resolve only to public addresses, or plain `http://`, unless the operator's `DESTINATION_ALLOWLIST` admits it"
}

const SIGNING = "Deliveries are signed as Standard Webhooks v1 (`webhook-id`, `webhook-timestamp`, `webhook-signature`)."

export class WebhookEndpointsApi extends HttpApiGroup.make("webhook-endpoints")
  .annotate(
    OpenApi.Description,
    "URLs of yours the platform calls when a run needs a human, ends or is reconciled, an approval expires or a deletion " +
      "job succeeds: signed (Standard Webhooks), retried, replayable."
  )
  .add(
    HttpApiEndpoint.post("createWebhookEndpoint")`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints`
      .annotate(OpenApi.Summary, "Create a webhook endpoint")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateWebhookEndpoint)
      .addSuccess(Single(WebhookEndpointWithSecret, 201))
      .annotate(
        OpenApi.Description,
        "Registers a URL for the given event types. The answer shows the signing `secret` once (an idempotent replay " +
          `shows null): keep it to verify deliveries. ${SIGNING} The URL passes the same destination checks as a tool connection. ` +
          "An environment has at most its `webhook_endpoints` quota of endpoints (16 unless an operator set another): past " +
          "it the answer is 429 `quota_exceeded` with `Retry-After: 60` and nothing is created; deleting an endpoint gives its place back."
      )
      .annotate(Refusals, [destinationRefused])
      .annotate(RequiredScopes, ["webhooks:write"])
  )
  .add(
    HttpApiEndpoint.get("listWebhookEndpoints")`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints`
      .annotate(OpenApi.Summary, "List webhook endpoints")
      .setUrlParams(ListParams)
      .addSuccess(List(WebhookEndpoint))
      .annotate(RequiredScopes, ["webhooks:read"])
  )
  .add(
    HttpApiEndpoint.get("getWebhookEndpoint")`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints/${endpointId}`
      .annotate(OpenApi.Summary, "Get a webhook endpoint")
      .addSuccess(Single(WebhookEndpoint))
      .annotate(RequiredScopes, ["webhooks:read"])
  )
  .add(
    HttpApiEndpoint.patch("updateWebhookEndpoint")`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints/${endpointId}`
      .annotate(OpenApi.Summary, "Update a webhook endpoint")
      .setHeaders(IdempotencyHeaders)
      .setPayload(UpdateWebhookEndpoint)
      .addSuccess(Single(WebhookEndpoint))
      .annotate(
        OpenApi.Description,
        "Changes the URL, the event types, `enabled` or the description. A disabled endpoint gets no new deliveries, and " +
          "its pending ones wait until it is enabled again. Pending deliveries go to the URL the endpoint has when they are sent."
      )
      .annotate(Refusals, [destinationRefused])
      .annotate(RequiredScopes, ["webhooks:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteWebhookEndpoint")`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints/${endpointId}`
      .annotate(OpenApi.Summary, "Delete a webhook endpoint")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(DeletedWebhookEndpoint))
      .annotate(
        OpenApi.Description,
        "Deletes the endpoint and its deliveries; nothing more is sent to it. Its place in the `webhook_endpoints` quota is free again."
      )
      .annotate(RequiredScopes, ["webhooks:write"])
  )
  .add(
    HttpApiEndpoint.post(
      "rotateWebhookEndpointSecret"
    )`/v1/tenants/${tenantId}/environments/${environment}/webhook-endpoints/${endpointId}/rotate-secret`
      .annotate(OpenApi.Summary, "Rotate a webhook endpoint's secret")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(WebhookEndpointWithSecret))
      .annotate(
        OpenApi.Description,
        "A new signing secret, shown once (an idempotent replay shows null). For 24 h (`previous_secret_expires_at`) " +
          "deliveries carry two signatures, space-separated in `webhook-signature`: one with the new secret, one with the previous."
      )
      .annotate(RequiredScopes, ["webhooks:write"])
  )
  .middleware(ServiceKey)
{}

export class WebhookDeliveriesApi extends HttpApiGroup.make("webhook-deliveries")
  .annotate(
    OpenApi.Description,
    "One delivery per event and subscribed endpoint, with its attempts: retried after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h " +
      "and 10 h, then `failed`; a replay sends it again with the same `webhook-id`. A delivery shows its last 50 attempts and " +
      "`attempt_count`, every attempt made. Deliveries are sent fairly across environments: one environment's slow or " +
      "failing endpoints never delay another's first attempt by more than 5 s."
  )
  .add(
    HttpApiEndpoint.get("listWebhookDeliveries")`/v1/tenants/${tenantId}/environments/${environment}/webhook-deliveries`
      .annotate(OpenApi.Summary, "List webhook deliveries")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...DeliveryListParams.fields }))
      .addSuccess(List(WebhookDelivery))
      .annotate(OpenApi.Description, "Newest first; `endpoint_id` and `status` filter.")
      .annotate(RequiredScopes, ["webhooks:read"])
  )
  .add(
    HttpApiEndpoint.get("getWebhookDelivery")`/v1/tenants/${tenantId}/environments/${environment}/webhook-deliveries/${deliveryId}`
      .annotate(OpenApi.Summary, "Get a webhook delivery")
      .addSuccess(Single(WebhookDelivery))
      .annotate(
        OpenApi.Description,
        "The delivery with its last 50 attempts, oldest first (older ones are dropped as new ones come), and `attempt_count`, " +
          "every attempt made, replays included."
      )
      .annotate(RequiredScopes, ["webhooks:read"])
  )
  .add(
    HttpApiEndpoint.post(
      "replayWebhookDelivery"
    )`/v1/tenants/${tenantId}/environments/${environment}/webhook-deliveries/${deliveryId}/replay`
      .annotate(OpenApi.Summary, "Replay a webhook delivery")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(WebhookDelivery))
      .annotate(
        OpenApi.Description,
        "A new attempt of the same delivery (same `webhook-id` and body, signed anew) as soon as possible: 202 with the " +
          "delivery, `pending`. A finished delivery's replay is one attempt; a pending one's next attempt comes forward. " +
          "409 `webhook_delivery_in_flight` while an attempt is under way, `webhook_endpoint_disabled` when its endpoint is disabled."
      )
      .annotate(RequiredScopes, ["webhooks:write"])
  )
  .middleware(ServiceKey)
{}
