/** Handlers of quotas (D16): the environment's view and the operator's. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { inCell } from "../Kernel/Policy.js"
import { Quotas } from "../Quotas.js"

export const QuotasLive = HttpApiBuilder.group(
  Api,
  "quotas",
  (handlers) => Effect.map(Quotas, (quotas) => handlers.handle("listQuotas", inCell((p) => quotas.list(p))))
)

export const OperatorQuotasLive = HttpApiBuilder.group(Api, "operator-quotas", (handlers) =>
  Effect.map(Quotas, (quotas) =>
    handlers
      .handle("operatorListQuotas", ({ path }) => quotas.operatorList(path.tenant_id, path.environment))
      .handle("setQuota", ({ path, payload }) => quotas.setLimit(path.tenant_id, path.environment, path.name, payload.limit))))
