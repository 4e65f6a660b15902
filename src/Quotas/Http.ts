/** Handlers of quotas (D16): the environment's view and the operator's. */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Quotas } from "../Quotas.js"

export const QuotasLive = HttpGroup.group(
  Api,
  "quotas",
  (handlers) => Effect.map(Quotas, (quotas) => handlers.handle("listQuotas", inCell((p) => quotas.list(p))))
)

export const OperatorQuotasLive = HttpGroup.group(Api, "operator-quotas", (handlers) =>
  Effect.map(Quotas, (quotas) =>
    handlers
      .handle("operatorListQuotas", ({ path }) => quotas.operatorList(path.tenant_id, path.environment))
      .handle("setQuota", ({ path, payload }) => quotas.setLimit(path.tenant_id, path.environment, path.name, payload.limit))))
