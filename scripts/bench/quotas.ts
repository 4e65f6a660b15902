/**
 * Bench 5 (issue 18): run admission with quotas on vs off, in the same run on the same Postgres.
 * Both sides execute the service's own admission statement (`admissionStatement`, one statement
 * per admission, each in its own transaction like a request's) over 64 cells at once: "on" with
 * the quota count the service writes into it (`countAdmission`, the cell's default sandbox
 * limits), "off" with a count that always fits. The quota check adds no statement (1 per
 * admission on both sides); what it costs is its upsert and the counters row's lock per cell.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { randomUUID } from "node:crypto"

import { defaultQuotaDefaults } from "../../src/Config/QuotaDefaults.js"
import * as Rows from "../../src/Database/Rows.js"
import { EnvironmentName } from "../../src/Kernel/Ids.js"
import { countAdmission } from "../../src/Quotas/Queries.js"
import { admissionStatement } from "../../src/Runs/Statements.js"

const Conversation = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  workspace_id: Schema.String,
  agent_revision_id: Schema.String,
  created_by_key_id: Schema.String
})

export const quotaAdmission = (
  /** `count` new conversations of each cell, by cell */
  conversations: (count: number) => Effect.Effect<ReadonlyArray<ReadonlyArray<string>>>,
  perCell: number,
  report: (name: string, figure: number, unit: string, baseline: number, target: string, met: boolean) => void
) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ids = yield* conversations(2 * perCell)
    const rowsOf = (cellIds: ReadonlyArray<string>) =>
      sql`SELECT id, tenant_id, environment, workspace_id, agent_revision_id, created_by_key_id
          FROM conversations WHERE id IN ${sql.in(cellIds)}`.pipe(Rows.all(Conversation), Effect.orDie)
    const cells = yield* Effect.forEach(ids, rowsOf)

    /** Admissions per second over all cells at once, each cell's in turn, with quotas counted or not. */
    const admit = (half: 0 | 1, quotas: boolean) =>
      Effect.gen(function*() {
        const started = performance.now()
        yield* Effect.forEach(cells, (conversations) =>
          Effect.forEach(conversations.slice(half * perCell, (half + 1) * perCell), (c) => {
            const at = new Date()
            const row = {
              id: `run_bench${randomUUID().replaceAll("-", "")}`,
              tenant_id: c.tenant_id,
              environment: c.environment,
              workspace_id: c.workspace_id,
              conversation_id: c.id,
              agent_revision_id: c.agent_revision_id,
              key_id: c.created_by_key_id,
              user_id: null,
              input: [{ type: "text" as const, text: "x" }],
              item: null,
              created_at: at,
              start_deadline_at: new Date(at.getTime() + 300_000),
              authorization_expires_at: new Date(at.getTime() + 900_000)
            }
            const cell = { tenantId: c.tenant_id, environment: c.environment }
            const counting = quotas ? countAdmission(sql, cell, defaultQuotaDefaults.sandbox, at, sql`run`) : sql`SELECT 1 FROM run`
            return sql.withTransaction(admissionStatement(sql, row, `evt_bench${randomUUID().replaceAll("-", "")}`, counting)).pipe(
              Effect.orDie
            )
          }, { discard: true }), { concurrency: "unbounded", discard: true })
        return (cells.length * perCell) / ((performance.now() - started) / 1000)
      })

    const off = yield* admit(0, false)
    const on = yield* admit(1, true)
    report("run admission, quotas on vs off (1 statement each)", on, "runs/s", off, ">= 0.8x off", on / off >= 0.8)
  })
