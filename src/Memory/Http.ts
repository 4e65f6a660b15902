/** Handlers of workspace memory (D14). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Memory } from "../Memory.js"
import { Quotas } from "../Quotas.js"

export const MemoryLive = HttpGroup.group(
  Api,
  "memory",
  (handlers) =>
    Effect.map(Effect.all([Memory, Quotas]), ([memory, quotas]) =>
      handlers
        .handle("listMemoryItems", inCell((p, { path, urlParams }) => memory.list(p, path.workspace_id, urlParams)))
        .handle("getMemoryItem", inCell((p, { path }) => memory.get(p, path.workspace_id, path.key)))
        .handle(
          "putMemoryItem",
          inCell((p, { path, payload }) =>
            Effect.flatMap(quotas.limitsOf(p), (limits) => memory.put(p, path.workspace_id, path.key, payload, limits.storage_bytes))
          )
        )
        .handle("deleteMemoryItem", inCell((p, { path }) => memory.remove(p, path.workspace_id, path.key))))
)
