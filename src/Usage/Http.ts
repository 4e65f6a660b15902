/** Handlers of usage (D16). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { UsageReports } from "../Usage.js"

export const UsageLive = HttpGroup.group(Api, "usage", (handlers) =>
  Effect.map(UsageReports, (usage) =>
    handlers
      .handle("getUsage", inCell((p, { urlParams }) => usage.getUsage(p, urlParams)))
      .handle("listUsageRecords", inCell((p, { urlParams }) => usage.listRecords(p, urlParams)))))
