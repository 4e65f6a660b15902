/** Workspace memory (D14). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { DeletedMemoryItem, MemoryItem, MemoryKey, MemoryListParams, PutMemoryItem } from "../Domain/Memory.js"
import { List, Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const workspaceId = idParam("workspace_id")
const key = HttpApiSchema.param("key", MemoryKey)

const MISSING = "A workspace of another tenant or environment is 404 with the body of a missing one."

export class MemoryApi extends HttpApiGroup.make("memory")
  .annotate(
    OpenApi.Description,
    "A key/value store per workspace, shared by its agents across conversations. Each key has a version (1, then one " +
      "more per write) for optimistic concurrency (`if_version`). Agents of a revision created with `memory: true` read " +
      "and write it through the built-in tools `memory_get` and `memory_put`."
  )
  .add(
    HttpApiEndpoint.get("listMemoryItems")`/v1/tenants/${tenantId}/environments/${environment}/workspaces/${workspaceId}/memory`
      .annotate(OpenApi.Summary, "List a workspace's memory")
      .setUrlParams(MemoryListParams)
      .addSuccess(List(MemoryItem))
      .annotate(
        OpenApi.Description,
        `Items in key order (byte-wise: \`-\` < \`.\` < digits < \`:\` < upper case < \`_\` < lower case), with their values; \`prefix\` keeps the keys that start with it. ${MISSING}`
      )
      .annotate(RequiredScopes, ["memory:read"])
  )
  .add(
    HttpApiEndpoint.get("getMemoryItem")`/v1/tenants/${tenantId}/environments/${environment}/workspaces/${workspaceId}/memory/${key}`
      .annotate(OpenApi.Summary, "Get a memory item")
      .addSuccess(Single(MemoryItem))
      .annotate(OpenApi.Description, `A key that is not stored is 404 (\`param: key\`). ${MISSING}`)
      .annotate(RequiredScopes, ["memory:read"])
  )
  .add(
    HttpApiEndpoint.put("putMemoryItem")`/v1/tenants/${tenantId}/environments/${environment}/workspaces/${workspaceId}/memory/${key}`
      .annotate(OpenApi.Summary, "Write a memory item")
      .setHeaders(Schema.Struct({
        ...IdempotencyHeaders.fields,
        "x-actor-token": Schema.optional(Schema.String).annotations({
          description: "An actor session token: the item's `updated_by` is that user (else the API key)"
        })
      }))
      .setPayload(PutMemoryItem)
      .addSuccess(Single(MemoryItem))
      .annotate(
        OpenApi.Description,
        "Creates the key (version 1) or replaces its value (version + 1); 200 with the item either way. `value` is any " +
          "JSON value of at most 64 KiB (the UTF-8 bytes of its JSON serialisation). `if_version` makes the write " +
          "conditional: `0` writes only a key that does not exist, `n` only a key at version `n` (a missing key is a " +
          "conflict); otherwise 409 `version_conflict` and nothing is written. Omitted: the write always succeeds. A deleted " +
          "key starts again at version 1. Values count toward the environment's `storage_bytes` quota (the UTF-8 bytes of " +
          "each stored value, with its files): a write past it (an overwrite counts the difference) is 429 " +
          "`quota_exceeded` (`Retry-After: 60`) and writes nothing; a delete gives the bytes back. " +
          MISSING
      )
      .annotate(Refusals, [
        {
          code: "value_too_large",
          param: "value",
          when: "`value` serialised as JSON is larger than 64 KiB (65,536 bytes of UTF-8)"
        }
      ])
      .annotate(RequiredScopes, ["memory:write"])
  )
  .add(
    HttpApiEndpoint.del("deleteMemoryItem")`/v1/tenants/${tenantId}/environments/${environment}/workspaces/${workspaceId}/memory/${key}`
      .annotate(OpenApi.Summary, "Delete a memory item")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Single(DeletedMemoryItem))
      .annotate(
        OpenApi.Description,
        `Deletes the key and its value; a key that is not stored is 404 (\`param: key\`). ${MISSING}`
      )
      .annotate(RequiredScopes, ["memory:write"])
  )
  .middleware(ServiceKey)
{}
