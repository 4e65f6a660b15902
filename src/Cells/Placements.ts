/**
 * Where cells run (issue 19): this node's runner (`ClusterNode`), and the SQL of the placement
 * rows (migration 0020) read with the cluster library's `cluster_runners` for operators.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import type { CellId } from "./Protocol.js"

/** This node's runner: its address, and whether it has joined the cluster (registered). */
export class ClusterNode extends Context.Tag("ClusterNode")<ClusterNode, {
  /** `host:port`, as the other runners and `cluster_runners` know it */
  readonly address: string
  /** registered in `cluster_runners`: until then `/readyz` is 503 */
  readonly joined: Effect.Effect<boolean>
  /** a runner whose heartbeat is older than this many seconds is dead (its shards move) */
  readonly expirationSeconds: number
  /**
   * this runner's lease on the shard (`group:n`) is confirmed, with a margin to spare: false after
   * a stall (the lease may have passed to another runner) until its next renewal says (issue 41)
   */
  readonly holdsLease: (shardId: string) => boolean
}>() {}

export const RunnerRow = Schema.Struct({
  address: Schema.String,
  healthy: Schema.Boolean,
  last_heartbeat: Rows.Time,
  alive: Schema.Boolean
})
export type RunnerRow = typeof RunnerRow.Type

export const PlacementRow = Schema.Struct({
  tenant_id: Schema.String,
  environment: Schema.String,
  runner: Schema.String,
  generation: Rows.Int8,
  started_at: Rows.Time
})
export type PlacementRow = typeof PlacementRow.Type

const CountRow = Schema.Struct({ n: Schema.Number })

export class PlacementsRepo extends Effect.Service<PlacementsRepo>()("PlacementsRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const alive = (seconds: number) => sql`last_heartbeat > now() - make_interval(secs => ${seconds})`

    /** The cell now runs on `runner` (its new generation). */
    const placed = (cell: CellId, runner: string, generation: number) =>
      sql`INSERT INTO cell_placements (tenant_id, environment, runner, generation)
          VALUES (${cell.tenantId}, ${cell.environment}, ${runner}, ${generation})
          ON CONFLICT (tenant_id, environment) DO UPDATE
            SET runner = EXCLUDED.runner, generation = EXCLUDED.generation, started_at = now()`.pipe(Rows.none)

    /** The cell stopped on `runner` (a newer placement elsewhere is left alone). */
    const removed = (cell: CellId, runner: string) =>
      sql`DELETE FROM cell_placements
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND runner = ${runner}`.pipe(Rows.none)

    /** Every registered runner, alive or not (dead ones until the library removes them). */
    const runners = (expirationSeconds: number) =>
      sql`SELECT address, healthy, last_heartbeat, ${alive(expirationSeconds)} AS alive
          FROM cluster_runners ORDER BY address`.pipe(Rows.all(RunnerRow))

    /** The cells running on a live runner. */
    const placements = (expirationSeconds: number) =>
      sql`SELECT p.* FROM cell_placements p JOIN cluster_runners r ON r.address = p.runner
          WHERE ${alive(expirationSeconds)} ORDER BY p.tenant_id, p.environment`.pipe(Rows.all(PlacementRow))

    /** Whether the cell runs on a live runner. */
    const isPlaced = (cell: CellId, expirationSeconds: number) =>
      sql`SELECT count(*)::int AS n FROM cell_placements p JOIN cluster_runners r ON r.address = p.runner
          WHERE p.tenant_id = ${cell.tenantId} AND p.environment = ${cell.environment} AND ${alive(expirationSeconds)}`.pipe(
        Rows.single(CountRow),
        Effect.map((row) => row.n > 0)
      )

    /** Whether the runner at `address` has registered (its row in cluster_runners, written as it starts). */
    const isRegistered = (address: string) =>
      sql`SELECT count(*)::int AS n FROM cluster_runners WHERE address = ${address}`.pipe(
        Rows.single(CountRow),
        Effect.map((row) => row.n > 0)
      )

    /**
     * The cluster library keeps its processed messages and their replies for good: those older
     * than `before` (a snowflake id: its time is in the id) are deleted.
     */
    const pruneMessages = (before: bigint) =>
      sql`WITH old AS (DELETE FROM cluster_messages WHERE processed AND id < ${before.toString()} RETURNING request_id)
          DELETE FROM cluster_replies WHERE request_id IN (SELECT request_id FROM old)`.pipe(Rows.none)

    return { placed, removed, runners, placements, isPlaced, isRegistered, pruneMessages }
  })
}) {}
