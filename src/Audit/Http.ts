/** Handlers of the audit log (D16). */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"

import { Api } from "../Api.js"
import { Audit } from "../Audit.js"
import { inCell } from "../Kernel/Policy.js"

export const AuditLive = HttpApiBuilder.group(
  Api,
  "audit",
  (handlers) => Effect.map(Audit, (audit) => handlers.handle("listAuditEntries", inCell((p, { urlParams }) => audit.list(p, urlParams))))
)
