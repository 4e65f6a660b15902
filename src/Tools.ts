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
import { connectionTransition, type CreateConnection, type Operation, type Tool } from "./Domain/Tools.js"
import * as Cursor from "./Kernel/Cursor.js"
import { conflict, invalid, notFound } from "./Kernel/Errors.js"
import { makeId, toIso } from "./Kernel/Ids.js"
import type { Gated } from "./Kernel/Policy.js"
import type { CellRef, Principal } from "./Kernel/Principal.js"
import { auditAbout } from "./Kernel/UnitOfWork.js"
import { Destinations } from "./Outbound/Destinations.js"
import { schemaProblem } from "./Tools/JsonSchemas.js"
import { type ConnectionRow, type ToolRow, ToolsRepo } from "./Tools/Repo.js"

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
        return yield* invalid(
          "parameter_missing",
          `${at}.reconciliation_path: a write needs a reconciliation path`,
          `${at}.reconciliation_path`
        )
      }
      if (op.effect === "read" && op.reconciliation_path !== undefined) {
        return yield* invalid("parameter_invalid", `${at}.reconciliation_path: only writes are reconciled`, `${at}.reconciliation_path`)
      }
      for (const field of ["input_schema", "output_schema"] as const) {
        const problem = yield* schemaProblem(op[field])
        if (problem !== undefined) {
          return yield* invalid("invalid_json_schema", `${at}.${field}: not a valid JSON Schema 2020-12: ${problem}`, `${at}.${field}`)
        }
      }
    }
  })

export class Tools extends Effect.Service<Tools>()("Tools", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* ToolsRepo
    const destinations = yield* Destinations
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const connectionRow = (cell: CellRef, id: string) =>
      Effect.flatMap(repo.connection(cell, id), (row) => row ? Effect.succeed(row) : Effect.fail(notFound("connection", "connection_id")))

    const register = (p: Principal, body: CreateConnection) =>
      Effect.gen(function*() {
        // (a query or fragment is refused by the request's schema, CreateConnection)
        yield* destinations.checkRegistration(body.base_url, "base_url")
        yield* checkOperations(body.operations)
        const id = yield* makeId("conn")
        yield* repo.insertConnection({ id, cell: p, body, keyId: p.keyId, at: yield* now })
        return toConnection(yield* connectionRow(p, id))
      })

    /** Operator review: approval makes one immutable tool per operation; rejection makes none. */
    const review = (connectionId: string, decision: "approve" | "reject", note: string | undefined) =>
      sql.withTransaction(Effect.gen(function*() {
        const row = yield* repo.lockConnection(connectionId)
        if (!row) return yield* notFound("connection", "id")
        yield* auditAbout({ tenantId: row.tenant_id, environment: row.environment })
        const next = connectionTransition(row.status, { _tag: "Review", decision })
        if (next === undefined) {
          return yield* conflict("connection_already_reviewed", `This connection was already reviewed (${row.status})`)
        }
        const at = yield* now
        yield* repo.setStatus(connectionId, next.to, note ?? null, at)
        if (next.makesTools) {
          for (const op of row.operations) {
            yield* repo.insertTool({
              id: yield* makeId("tool"),
              tenant_id: row.tenant_id,
              environment: row.environment,
              connection_id: row.id,
              name: op.name,
              description: op.description ?? null,
              effect: op.effect,
              base_url: row.base_url,
              path: op.path,
              reconciliation_path: op.reconciliation_path ?? null,
              input_schema: op.input_schema,
              output_schema: op.output_schema,
              created_at: at
            })
          }
        }
        return toConnection(yield* connectionRow({ tenantId: row.tenant_id, environment: row.environment }, row.id))
      }))

    const listConnections = Cursor.listPage("connections", repo.connections, toConnection)

    const listTools = (p: Principal, params: Cursor.ListParams & { connection_id?: string | undefined }) =>
      Cursor.listPage(
        `tools:${params.connection_id ?? ""}`,
        (t, e, after, limit) => repo.tools(t, e, params.connection_id, after, limit),
        toTool
      )(p, params)

    const getTool = (p: CellRef, id: string) =>
      Effect.flatMap(repo.tool(p, id), (row) => (row ? Effect.succeed(toTool(row)) : Effect.fail(notFound("tool", "tool_id"))))

    /** The tools of a revision, in the given order; all must be of the cell and of an active connection. */
    const toolsForRevision = (p: CellRef, ids: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        if (ids.length === 0) return []
        const rows = yield* repo.activeTools(p, ids)
        const byId = new Map(rows.map((r) => [r.id, r]))
        const names = new Set<string>()
        for (const [i, id] of ids.entries()) {
          const row = byId.get(id)
          if (!row) return yield* invalid("unknown_tool", `tool_ids.${i}: no such reviewed tool: ${id}`, `tool_ids.${i}`)
          if (names.has(row.name)) {
            return yield* invalid(
              "parameter_invalid",
              `tool_ids.${i}: two tools named "${row.name}"; the model could not tell them apart`,
              `tool_ids.${i}`
            )
          }
          names.add(row.name)
        }
        return ids.map((id) => byId.get(id)!)
      })

    return {
      register: (p: Gated<Principal>, body: CreateConnection) => dieOnSqlError(register(p, body)),
      getConnection: (p: CellRef, id: string) => dieOnSqlError(Effect.map(connectionRow(p, id), toConnection)),
      listConnections: (p: Principal, params: Cursor.ListParams) => dieOnSqlError(listConnections(p, params)),
      review: (id: string, decision: "approve" | "reject", note?: string) => dieOnSqlError(review(id, decision, note)),
      /**
       * The connections awaiting review in every cell (oldest first, at most `limit`), each with the
       * addresses its base URL resolves to now and their classes (the operator console, issue 39).
       */
      pendingReview: (limit = 50) =>
        dieOnSqlError(
          Effect.flatMap(repo.pendingReview(limit), (rows) =>
            Effect.forEach(rows, (row) =>
              Effect.map(
                destinations.addressClasses(row.base_url),
                (addresses) => ({ ...toConnection(row), tenant_id: row.tenant_id, environment: row.environment, addresses })
              ), {
              concurrency: 4
            }))
        ),
      listTools: (p: Principal, params: Cursor.ListParams & { connection_id?: string | undefined }) => dieOnSqlError(listTools(p, params)),
      getTool: (p: CellRef, id: string) => dieOnSqlError(getTool(p, id)),
      toolsForRevision: (p: CellRef, ids: ReadonlyArray<string>) => dieOnSqlError(toolsForRevision(p, ids)),
      /** The tools a revision pins, as rows (for its runs), whatever their connection's status now. */
      toolRows: (ids: ReadonlyArray<string>) => dieOnSqlError(repo.toolsById(ids))
    } as const
  }),
  dependencies: [ToolsRepo.Default, Destinations.Default]
}) {}

// ---- the front door: what other capabilities and the Runtime use of Tools (scripts/layers.ts) ----
export { CallOutcome, Invoker } from "./Tools/Invoker.js"
export type { CallContext } from "./Tools/Invoker.js"
export { validate } from "./Tools/JsonSchemas.js"
export { OperationsRepo } from "./Tools/OperationsRepo.js"
export type { ToolRow } from "./Tools/Repo.js"
export { SigningKeys } from "./Tools/Signing.js"
