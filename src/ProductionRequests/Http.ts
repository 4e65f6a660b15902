/** Handlers of the production request (D17): the tenant's on its sandbox, the operator's decisions. */
import { Effect } from "effect"

import { Api } from "../Api.js"
import { NotFound } from "../Kernel/Errors.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { type CellRequest, type Gated, inCell } from "../Kernel/Policy.js"
import type { Principal } from "../Kernel/Principal.js"
import { ProductionRequests } from "../ProductionRequests.js"

const notOnProduction = new NotFound({
  code: "resource_missing",
  message: "Production requests are made from the sandbox environment",
  param: "environment"
})

/** `inCell` of the sandbox only: on `production` the resource does not exist (404, before any idempotency gate). */
const inSandbox = <Req extends CellRequest, A, E, R>(handler: (principal: Gated<Principal>, request: Req) => Effect.Effect<A, E, R>) => {
  const run = inCell(handler)
  return (request: Req) => (request.path.environment === "sandbox" ? run(request) : Effect.fail(notOnProduction))
}

export const ProductionRequestsLive = HttpGroup.group(
  Api,
  "production-request",
  (handlers) =>
    Effect.map(ProductionRequests, (requests) =>
      handlers
        .handle("createProductionRequest", inSandbox((p, { payload }) => requests.submit(p, payload)))
        .handle("getProductionRequest", inSandbox((p) => requests.latest(p))))
)

export const OperatorProductionRequestsLive = HttpGroup.group(
  Api,
  "operator-production-requests",
  (handlers) =>
    Effect.map(ProductionRequests, (requests) =>
      handlers
        .handle("operatorListProductionRequests", ({ urlParams }) => requests.list({ status: urlParams.status }, urlParams))
        .handle("operatorGetProductionRequest", ({ path }) => requests.get(path.id))
        .handle("approveProductionRequest", ({ path }) => requests.approve(path.id))
        .handle("rejectProductionRequest", ({ path, payload }) => requests.reject(path.id, payload?.reason)))
)
