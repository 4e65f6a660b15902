/** Handlers of connections, tools and the public key set (D10, D12). */
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"
import { Tools } from "../Tools.js"
import { SigningKeys } from "./Signing.js"

export const ConnectionsLive = HttpGroup.group(Api, "connections", (handlers) =>
  Effect.map(Tools, (tools) =>
    handlers
      .handle("createConnection", inCell((p, { payload }) => tools.register(p, payload)))
      .handle("listConnection", inCell((p, { urlParams }) => tools.listConnections(p, urlParams)))
      .handle("getConnection", inCell((p, { path }) => tools.getConnection(p, path.connection_id)))
      .handle("listTool", inCell((p, { urlParams }) => tools.listTools(p, urlParams)))
      .handle("getTool", inCell((p, { path }) => tools.getTool(p, path.tool_id)))))

export const KeySetLive = HttpGroup.group(
  Api,
  "jwks",
  (handlers) =>
    Effect.map(SigningKeys, (signing) => handlers.handle("getJwks", ({ path }) => signing.jwksOf(path.tenant_id, path.environment)))
)
