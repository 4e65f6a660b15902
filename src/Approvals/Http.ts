/** Handlers of approvals (D9). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Approvals } from "../Approvals.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"

export const ApprovalsLive = HttpGroup.group(Api, "approvals", (handlers) =>
  Effect.map(Approvals, (approvals) =>
    handlers
      .handle("listApproval", inCell((p, { urlParams }) => approvals.list(p, urlParams)))
      .handle("getApproval", inCell((p, { path }) => approvals.get(p, path.approval_id)))
      .handle(
        "decideApproval",
        inCell((p, { headers, path, payload }) => approvals.decide(p, path.approval_id, headers["x-actor-token"], payload))
      )))
