/** SQL of connections and tools (contract 2.3, 3.2; D10, D12). Rows decoded; no service logic. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { ConnectionStatus, type CreateConnection, Operation } from "../Domain/Tools.js"
import { EnvironmentName } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"

export const ConnectionRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  name: Schema.String,
  base_url: Schema.String,
  owner: Schema.Struct({ type: Schema.Literal("tenant") }),
  authentication: Schema.Struct({ type: Schema.Literal("service_signed_request") }),
  operations: Schema.Array(Operation),
  status: ConnectionStatus,
  review_note: Schema.NullOr(Schema.String),
  reviewed_at: Rows.TimeOrNull,
  created_at: Rows.Time,
  updated_at: Rows.Time,
  /** the tools its review made, in order (none before approval) */
  tool_ids: Schema.NullOr(Schema.Array(Schema.String))
})
export type ConnectionRow = typeof ConnectionRow.Type

export const ToolRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  connection_id: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  effect: Schema.Literal("read", "write"),
  base_url: Schema.String,
  path: Schema.String,
  reconciliation_path: Schema.NullOr(Schema.String),
  input_schema: Rows.JsonObject,
  output_schema: Rows.JsonObject,
  created_at: Rows.Time
})
export type ToolRow = typeof ToolRow.Type

export class ToolsRepo extends Effect.Service<ToolsRepo>()("ToolsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const after = (id: string | undefined) => (id === undefined ? sql`` : sql`AND c.id < ${id}`)

    /** Connections with the ids of the tools their review made. */
    const selectConnections = sql`
      SELECT c.*, (SELECT array_agg(t.id ORDER BY t.created_at, t.id) FROM tools t WHERE t.connection_id = c.id) AS tool_ids
      FROM connections c`

    /** Every cell's connections awaiting review, oldest first (the operator console's queue). */
    const pendingReview = (limit: number) =>
      sql`${selectConnections} WHERE c.status = 'pending_review' ORDER BY c.created_at, c.id LIMIT ${limit}`
        .pipe(Rows.all(ConnectionRow))

    const connection = (cell: CellRef, id: string) =>
      sql`${selectConnections} WHERE c.id = ${id} AND c.tenant_id = ${cell.tenantId} AND c.environment = ${cell.environment}`
        .pipe(Rows.maybe(ConnectionRow))

    const connections = (tenantId: string, environment: string, cursor: string | undefined, limit: number) =>
      sql`${selectConnections} WHERE c.tenant_id = ${tenantId} AND c.environment = ${environment} ${after(cursor)}
          ORDER BY c.id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ConnectionRow))

    const insertConnection = (c: { id: string; cell: CellRef; body: CreateConnection; keyId: string; at: Date }) =>
      sql`INSERT INTO connections (id, tenant_id, environment, name, base_url, owner, authentication, operations,
                                   status, created_by_key_id, created_at, updated_at)
          VALUES (${c.id}, ${c.cell.tenantId}, ${c.cell.environment}, ${c.body.name}, ${c.body.base_url},
                  ${JSON.stringify(c.body.owner)}::jsonb, ${JSON.stringify(c.body.authentication)}::jsonb,
                  ${JSON.stringify(c.body.operations)}::jsonb, 'pending_review', ${c.keyId}, ${c.at}, ${c.at})`
        .pipe(Rows.none)

    /** The connection, locked for its review (any cell: the operator plane). */
    const lockConnection = (id: string) =>
      sql`SELECT *, NULL::text[] AS tool_ids FROM connections WHERE id = ${id} FOR UPDATE`.pipe(Rows.maybe(ConnectionRow))

    /** The one write of a connection's status (its transition comes from the domain's table). */
    const setStatus = (id: string, status: ConnectionRow["status"], note: string | null, at: Date) =>
      sql`UPDATE connections SET status = ${status}, review_note = ${note}, reviewed_at = ${at}, updated_at = ${at}
          WHERE id = ${id}`.pipe(Rows.none)

    const insertTool = (t: Omit<ToolRow, "environment"> & { environment: string }) =>
      sql`INSERT INTO tools (id, tenant_id, environment, connection_id, name, description, effect, base_url, path,
                             reconciliation_path, input_schema, output_schema, created_at)
          VALUES (${t.id}, ${t.tenant_id}, ${t.environment}, ${t.connection_id}, ${t.name}, ${t.description},
                  ${t.effect}, ${t.base_url}, ${t.path}, ${t.reconciliation_path},
                  ${JSON.stringify(t.input_schema)}::jsonb, ${JSON.stringify(t.output_schema)}::jsonb, ${t.created_at})`
        .pipe(Rows.none)

    const tools = (
      tenantId: string,
      environment: string,
      connectionId: string | undefined,
      cursor: string | undefined,
      limit: number
    ) =>
      sql`SELECT * FROM tools WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${connectionId === undefined ? sql`` : sql`AND connection_id = ${connectionId}`}
          ${cursor === undefined ? sql`` : sql`AND id < ${cursor}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(ToolRow))

    const tool = (cell: CellRef, id: string) =>
      sql`SELECT * FROM tools WHERE id = ${id} AND tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`
        .pipe(Rows.maybe(ToolRow))

    /** Tools of the cell whose connection is active, among `ids`. */
    const activeTools = (cell: CellRef, ids: ReadonlyArray<string>) =>
      sql`SELECT t.* FROM tools t
          JOIN connections c ON c.id = t.connection_id AND c.status = 'active'
          WHERE t.id IN ${sql.in([...ids])} AND t.tenant_id = ${cell.tenantId} AND t.environment = ${cell.environment}`
        .pipe(Rows.all(ToolRow))

    /** Tools by id, whatever their connection's status (a revision pins them). */
    const toolsById = (ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.succeed([] as ReadonlyArray<ToolRow>)
        : sql`SELECT * FROM tools WHERE id IN ${sql.in([...ids])}`.pipe(Rows.all(ToolRow))

    return {
      pendingReview,
      connection,
      connections,
      insertConnection,
      lockConnection,
      setStatus,
      insertTool,
      tools,
      tool,
      activeTools,
      toolsById
    } as const
  })
}) {}
