/**
 * Customer tool connections and tools (contract 2.3, 3.2, 4.1; D10, D12).
 *
 * A connection is registered `pending_review` and cannot execute until an operator reviews it.
 * Registration checks everything it can up front: the destination (D10: https only, no local,
 * private, link-local or metadata address, also after DNS resolution), unique operation names, a
 * reconciliation path on every write, and input/output schemas that are valid JSON Schema 2020-12.
 * On approval each operation becomes a tool with an immutable id; agent revisions reference tool
 * ids, and only active tools of the same tenant and environment can be referenced.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { dieOnSqlError } from "./Database/Defects.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import type { CreateConnection, Operation, Tool } from "./Domain/Tools.js"
import * as Cursor from "./Kernel/Cursor.js"
import { Destinations } from "./Outbound/Destinations.js"
import { schemaProblem } from "./Tools/JsonSchemas.js"

export interface ConnectionRow {
  readonly id: string
  readonly tenant_id: string
  readonly environment: string
  readonly name: string
  readonly base_url: string
  readonly owner: { type: "tenant" }
  readonly authentication: { type: "service_signed_request" }
  readonly operations: ReadonlyArray<Operation>
  readonly status: "pending_review" | "active" | "rejected"
  readonly review_note: string | null
  readonly reviewed_at: Date | null
  readonly created_at: Date
  readonly updated_at: Date
  readonly tool_ids: ReadonlyArray<string> | null
}

export interface ToolRow {
  readonly id: string
  readonly tenant_id: string
  readonly environment: string
  readonly connection_id: string
  readonly name: string
  readonly description: string | null
  readonly effect: "read" | "write"
  readonly base_url: string
  readonly path: string
  readonly reconciliation_path: string | null
  readonly input_schema: Record<string, unknown>
  readonly output_schema: Record<string, unknown>
  readonly created_at: Date
}

/** The exact URL of an operation: base URL (without a trailing slash) + path. */
export const joinUrl = (baseUrl: string, path: string) => `${baseUrl.replace(/\/+$/, "")}${path}`

export const toTool = (r: ToolRow): Tool => ({
  id: r.id,
  object: "tool",
  connection_id: r.connection_id,
  name: r.name,
  description: r.description,
  effect: r.effect,
  url: joinUrl(r.base_url, r.path),
  reconciliation_url: r.reconciliation_path === null ? null : joinUrl(r.base_url, r.reconciliation_path),
  input_schema: r.input_schema,
  output_schema: r.output_schema,
  created_at: toIso(r.created_at)
})

const toConnection = (r: ConnectionRow) => ({
  id: r.id,
  object: "connection" as const,
  name: r.name,
  type: "customer_https" as const,
  owner: r.owner,
  base_url: r.base_url,
  authentication: r.authentication,
  operations: r.operations,
  status: r.status,
  review_note: r.review_note,
  reviewed_at: r.reviewed_at === null ? null : toIso(r.reviewed_at),
  tool_ids: r.tool_ids ?? [],
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})

/** Where a write's outcome is asked for: its reconciliation path with `{operation_id}` filled in. */
export const reconciliationUrl = (baseUrl: string, reconciliationPath: string, operationId: string) =>
  joinUrl(baseUrl, reconciliationPath.replaceAll("{operation_id}", encodeURIComponent(operationId)))

/** Checks the operations of a registration; the first problem is a 400 naming its parameter. */
const checkOperations = (operations: ReadonlyArray<Operation>) =>
  Effect.gen(function*() {
    const seen = new Set<string>()
    for (const [i, op] of operations.entries()) {
      const at = `operations.${i}`
      if (seen.has(op.name)) return yield* invalid("parameter_invalid", `${at}.name: "${op.name}" is used twice`, `${at}.name`)
      seen.add(op.name)
      if (op.effect === "write" && op.reconciliation_path === undefined) {
        return yield* invalid("parameter_missing", `${at}.reconciliation_path: a write needs a reconciliation path`, `${at}.reconciliation_path`)
      }
      if (op.effect === "read" && op.reconciliation_path !== undefined) {
        return yield* invalid("parameter_invalid", `${at}.reconciliation_path: only writes are reconciled`, `${at}.reconciliation_path`)
      }
      for (const field of ["input_schema", "output_schema"] as const) {
        const problem = schemaProblem(op[field])
        if (problem !== undefined) {
          return yield* invalid("invalid_json_schema", `${at}.${field}: not a valid JSON Schema 2020-12: ${problem}`, `${at}.${field}`)
        }
      }
    }
  })

export class Tools extends Effect.Service<Tools>()("Tools", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const destinations = yield* Destinations

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    /** Connections with the ids of the tools their review made. */
    const selectConnections = sql`
      SELECT c.*, (SELECT array_agg(t.id ORDER BY t.created_at, t.id) FROM tools t WHERE t.connection_id = c.id) AS tool_ids
      FROM connections c`

    const connectionRow = (cell: CellRef, id: string) =>
      Effect.flatMap(
        sql<ConnectionRow>`${selectConnections} WHERE c.id = ${id} AND c.tenant_id = ${cell.tenantId} AND c.environment = ${cell.environment}`,
        (rows) => (rows[0] ? Effect.succeed(rows[0]) : Effect.fail(notFound("connection", "connection_id")))
      )

    const register = (p: Principal, body: CreateConnection) =>
      Effect.gen(function*() {
        yield* destinations.checkRegistration(body.base_url, "base_url")
        if (/[?#]/.test(body.base_url)) {
          return yield* invalid("parameter_invalid", "base_url: must not have a query or fragment", "base_url")
        }
        yield* checkOperations(body.operations)
        const at = yield* now
        const id = yield* makeId("conn")
        yield* sql`
          INSERT INTO connections (id, tenant_id, environment, name, base_url, owner, authentication, operations,
                                   status, created_by_key_id, created_at, updated_at)
          VALUES (${id}, ${p.tenantId}, ${p.environment}, ${body.name}, ${body.base_url}, ${JSON.stringify(body.owner)}::jsonb,
                  ${JSON.stringify(body.authentication)}::jsonb, ${JSON.stringify(body.operations)}::jsonb,
                  'pending_review', ${p.keyId}, ${at}, ${at})`
        return toConnection(yield* connectionRow(p, id))
      })

    /** Operator review: approval makes one immutable tool per operation; rejection makes none. */
    const review = (connectionId: string, decision: "approve" | "reject", note: string | undefined) =>
      sql.withTransaction(Effect.gen(function*() {
        const [row] = yield* sql<ConnectionRow>`SELECT *, NULL::text[] AS tool_ids FROM connections WHERE id = ${connectionId} FOR UPDATE`
        if (!row) return yield* notFound("connection", "id")
        if (row.status !== "pending_review") {
          return yield* conflict("connection_already_reviewed", `This connection was already reviewed (${row.status})`)
        }
        const at = yield* now
        yield* sql`UPDATE connections SET status = ${decision === "approve" ? "active" : "rejected"},
                                          review_note = ${note ?? null}, reviewed_at = ${at}, updated_at = ${at}
                   WHERE id = ${connectionId}`
        if (decision === "approve") {
          for (const op of row.operations) {
            const toolId = yield* makeId("tool")
            yield* sql`
              INSERT INTO tools (id, tenant_id, environment, connection_id, name, description, effect, base_url, path,
                                 reconciliation_path, input_schema, output_schema, created_at)
              VALUES (${toolId}, ${row.tenant_id}, ${row.environment}, ${row.id}, ${op.name}, ${op.description ?? null},
                      ${op.effect}, ${row.base_url}, ${op.path}, ${op.reconciliation_path ?? null},
                      ${JSON.stringify(op.input_schema)}::jsonb, ${JSON.stringify(op.output_schema)}::jsonb, ${at})`
          }
        }
        return toConnection(yield* connectionRow({ tenantId: row.tenant_id, environment: row.environment as any }, row.id))
      }))

    const listConnections = Cursor.listPage(
      "connections",
      (t, e, after, limit) =>
        sql<ConnectionRow>`
          ${selectConnections} WHERE c.tenant_id = ${t} AND c.environment = ${e}
          ${after === undefined ? sql`` : sql`AND c.id < ${after}`}
          ORDER BY c.id DESC LIMIT ${limit + 1}`,
      toConnection
    )

    const listTools = (p: Principal, params: Cursor.ListParams & { connection_id?: string | undefined }) =>
      Cursor.listPage(
        `tools:${params.connection_id ?? ""}`,
        (t, e, after, limit) =>
          sql<ToolRow>`
            SELECT * FROM tools WHERE tenant_id = ${t} AND environment = ${e}
            ${params.connection_id === undefined ? sql`` : sql`AND connection_id = ${params.connection_id}`}
            ${after === undefined ? sql`` : sql`AND id < ${after}`}
            ORDER BY id DESC LIMIT ${limit + 1}`,
        toTool
      )(p, params)

    const getTool = (p: CellRef, id: string) =>
      Effect.flatMap(
        sql<ToolRow>`SELECT * FROM tools
                     WHERE id = ${id} AND tenant_id = ${p.tenantId} AND environment = ${p.environment}`,
        (rows) => (rows[0] ? Effect.succeed(toTool(rows[0])) : Effect.fail(notFound("tool", "tool_id")))
      )

    /** The tools of a revision, in the given order; all must be of the cell and of an active connection. */
    const toolsForRevision = (p: CellRef, ids: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        if (ids.length === 0) return []
        const rows = yield* sql<ToolRow>`
          SELECT t.* FROM tools t
          JOIN connections c ON c.id = t.connection_id AND c.status = 'active'
          WHERE t.id IN ${sql.in([...ids])} AND t.tenant_id = ${p.tenantId} AND t.environment = ${p.environment}`
        const byId = new Map(rows.map((r) => [r.id, r]))
        const names = new Set<string>()
        for (const [i, id] of ids.entries()) {
          const row = byId.get(id)
          if (!row) return yield* invalid("unknown_tool", `tool_ids.${i}: no such reviewed tool: ${id}`, `tool_ids.${i}`)
          if (names.has(row.name)) {
            return yield* invalid("parameter_invalid", `tool_ids.${i}: two tools named "${row.name}"; the model could not tell them apart`, `tool_ids.${i}`)
          }
          names.add(row.name)
        }
        return ids.map((id) => byId.get(id)!)
      })

    return {
      register: (p: Principal, body: CreateConnection) => dieOnSqlError(register(p, body)),
      getConnection: (p: CellRef, id: string) => dieOnSqlError(Effect.map(connectionRow(p, id), toConnection)),
      listConnections: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listConnections(p, params)),
      review: (id: string, decision: "approve" | "reject", note?: string) => dieOnSqlError(review(id, decision, note)),
      listTools: (p: Principal, params: Cursor.ListParams & { connection_id?: string | undefined }) =>
        dieOnSqlError(listTools(p, params)),
      getTool: (p: CellRef, id: string) => dieOnSqlError(getTool(p, id)),
      toolsForRevision: (p: CellRef, ids: ReadonlyArray<string>) => dieOnSqlError(toolsForRevision(p, ids))
    } as const
  }),
  dependencies: [Destinations.Default]
}) {}
