/** Connections, tools and the public key set of invocation signing (D10, D12). */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { Connection, CreateConnection, Tool, ToolListParams } from "../Domain/Tools.js"
import { ListParams } from "../Kernel/Cursor.js"
import { List, Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"

const connectionId = idParam("connection_id")
const toolId = idParam("tool_id")

export class ConnectionsApi extends HttpApiGroup.make("connections")
  .annotate(OpenApi.Description, "Customer-hosted HTTPS tool connections, reviewed by an operator, and the tools they expose.")
  .add(
    HttpApiEndpoint.post("createConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections`
      .annotate(OpenApi.Summary, "Create a connection")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateConnection)
      .addSuccess(Single(Connection, 201))
      .annotate(
        OpenApi.Description,
        "Registers a customer HTTPS connection, `pending_review` until an operator reviews it. " +
          "The destination must be public HTTPS; operation names are unique; every write needs a `reconciliation_path` " +
          "and a read has none; operation schemas must be valid JSON Schema 2020-12."
      )
      .annotate(Refusals, [
        {
          code: "destination_refused",
          param: "base_url",
          when:
            "`base_url` is not a public `https://` destination: a local, private, link-local or metadata host or address, a name that does not resolve only to public addresses, or plain `http://`, unless the operator's `DESTINATION_ALLOWLIST` admits it"
        },
        { code: "parameter_invalid", param: "operations.N.name", when: "two operations have the same `name`" },
        {
          code: "parameter_missing",
          param: "operations.N.reconciliation_path",
          when: "a `write` operation has no `reconciliation_path`"
        },
        {
          code: "parameter_invalid",
          param: "operations.N.reconciliation_path",
          when: "a `read` operation has a `reconciliation_path`: only writes are reconciled"
        },
        ...(["input_schema", "output_schema"] as const).map((field) => ({
          code: "invalid_json_schema",
          param: `operations.N.${field}`,
          when: `\`${field}\` is not a valid JSON Schema 2020-12: strict (an unknown keyword is refused), ` +
            "`$ref` only within the schema, each check at most 1 s"
        }))
      ])
      .annotate(RequiredScopes, ["connections:write"])
  )
  .add(
    HttpApiEndpoint.get("listConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections`
      .annotate(OpenApi.Summary, "List connections")
      .setUrlParams(ListParams)
      .addSuccess(List(Connection))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("getConnection")`/v1/tenants/${tenantId}/environments/${environment}/connections/${connectionId}`
      .annotate(OpenApi.Summary, "Get a connection")
      .addSuccess(Single(Connection))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("listTool")`/v1/tenants/${tenantId}/environments/${environment}/tools`
      .annotate(OpenApi.Summary, "List tools")
      .setUrlParams(Schema.Struct({ ...ListParams.fields, ...ToolListParams.fields }))
      .addSuccess(List(Tool))
      .annotate(
        OpenApi.Description,
        "Tools of reviewed connections, one per operation, each with an immutable id; `connection_id` filters."
      )
      .annotate(RequiredScopes, ["connections:read"])
  )
  .add(
    HttpApiEndpoint.get("getTool")`/v1/tenants/${tenantId}/environments/${environment}/tools/${toolId}`
      .annotate(OpenApi.Summary, "Get a tool")
      .addSuccess(Single(Tool))
      .annotate(RequiredScopes, ["connections:read"])
  )
  .middleware(ServiceKey)
{}

/** JWKS: public (no key), so customer tool servers can verify invocation tokens. */
export const Jwks = Schema.Struct({ keys: Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Unknown })) })
  .annotations({ identifier: "JWKS" })

export class KeySetApi extends HttpApiGroup.make("jwks")
  .annotate(OpenApi.Description, "The public keys customer tool servers verify invocation tokens with (no authentication).")
  .add(
    HttpApiEndpoint.get("getJwks")`/v1/tenants/${tenantId}/environments/${environment}/jwks.json`
      .annotate(OpenApi.Summary, "Get the invocation signing keys")
      .addSuccess(Jwks)
      .annotate(
        OpenApi.Description,
        "The Ed25519 keys (JWK, `alg` EdDSA) tool invocation tokens of this cell are signed with. " +
          "No authentication. A rotated-out key stays listed until every token it signed has expired."
      )
  )
{}
