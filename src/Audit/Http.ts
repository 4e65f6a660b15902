/** Handlers of the audit log (D16). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Audit } from "../Audit.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"

export const AuditLive = HttpGroup.group(
  Api,
  "audit",
  (handlers) => Effect.map(Audit, (audit) => handlers.handle("listAuditEntries", inCell((p, { urlParams }) => audit.list(p, urlParams))))
)
