/**
 * The production request (D17): the tenant's side on its sandbox (`/v1`), and the operator's
 * decisions (`/operator/v1`, bearer OPERATOR_TOKEN, left out of the OpenAPI document as the rest of
 * the operator plane).
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import {
  CreateProductionRequest,
  DecideProductionRequest,
  OperatorProductionRequest,
  OperatorProductionRequestListParams,
  ProductionRequest
} from "../Domain/ProductionRequests.js"
import { ListParams } from "../Kernel/Cursor.js"
import { Single } from "../Kernel/Envelope.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { OperatorAuth, RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const id = idParam("id")

const SANDBOX_ONLY = "Only on `sandbox`: on `production` the path is 404 `resource_missing` (param `environment`)."

export class ProductionRequestsApi extends HttpApiGroup.make("production-request")
  .annotate(
    OpenApi.Description,
    "The way from sandbox to production: a tenant asks for a `production` environment from its sandbox; an operator approves " +
      "it (the environment is provisioned, with no keys until an operator makes one: `sk_live_...`) or rejects it with a reason."
  )
  .add(
    HttpApiEndpoint.post("createProductionRequest")`/v1/tenants/${tenantId}/environments/${environment}/production-request`
      .annotate(OpenApi.Summary, "Request production")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateProductionRequest)
      .addSuccess(Single(ProductionRequest, 201))
      .annotate(
        OpenApi.Description,
        "Submits a request for the tenant's `production` environment; it stays `submitted` until an operator decides. " +
          "One open request per tenant: another while one is `submitted` is 409 `production_request_open`; once one is " +
          "rejected a new one may be submitted. A tenant whose production environment exists is 409 " +
          "`production_environment_exists`. The decision is announced by the webhook event `production_request.decided`. " +
          SANDBOX_ONLY
      )
      .annotate(RequiredScopes, ["environments:write"])
  )
  .add(
    HttpApiEndpoint.get("getProductionRequest")`/v1/tenants/${tenantId}/environments/${environment}/production-request`
      .annotate(OpenApi.Summary, "Get the latest production request")
      .addSuccess(Single(ProductionRequest))
      .annotate(
        OpenApi.Description,
        `The tenant's most recent production request, whatever its status; 404 when it has made none. ${SANDBOX_ONLY}`
      )
      .annotate(RequiredScopes, ["environments:read"])
  )
  .middleware(ServiceKey)
{}

export class OperatorProductionRequestsApi extends HttpApiGroup.make("operator-production-requests")
  .add(
    HttpApiEndpoint.get("operatorListProductionRequests", "/operator/v1/production-requests")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...OperatorProductionRequestListParams.fields }))
      .addSuccess(Schema.Struct({ items: Schema.Array(OperatorProductionRequest), next_cursor: Schema.NullOr(Schema.String) }))
      .annotate(OpenApi.Summary, "List production requests (newest first; `status` filters)")
  )
  .add(
    HttpApiEndpoint.get("operatorGetProductionRequest")`/operator/v1/production-requests/${id}`
      .addSuccess(OperatorProductionRequest)
      .annotate(OpenApi.Summary, "Get a production request")
  )
  .add(
    HttpApiEndpoint.post("approveProductionRequest")`/operator/v1/production-requests/${id}/approve`
      .addSuccess(OperatorProductionRequest)
      .annotate(
        OpenApi.Summary,
        "Approve: provisions the tenant's `production` environment (no keys); idempotent; 409 `already_decided` if rejected"
      )
  )
  .add(
    HttpApiEndpoint.post("rejectProductionRequest")`/operator/v1/production-requests/${id}/reject`
      // no body at all reads as `{}`
      .setPayload(Schema.NullOr(DecideProductionRequest))
      .addSuccess(OperatorProductionRequest)
      .annotate(OpenApi.Summary, "Reject with an optional reason; idempotent; 409 `already_decided` if approved")
  )
  .middleware(OperatorAuth)
  .annotate(OpenApi.Exclude, true)
{}
