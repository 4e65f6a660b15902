/**
 * A cell: one tenant/environment pair. A scoped fiber tree owning its rate limiter and its
 * generation (and, with the runs issue, its run actors and SSE stream counts). Commands are
 * processed through `handle`; everything the cell owns is released when its scope closes.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Ref } from "effect"
import * as RateLimiter from "./RateLimiter.js"
import type { CellCommand, CellId, ReplyOf } from "./CellProtocol.js"

export interface Cell {
  readonly id: CellId
  readonly generation: number
  readonly lastUsed: Ref.Ref<number>
  readonly handle: <C extends CellCommand>(command: C) => Effect.Effect<ReplyOf<C>>
}

export interface CellOptions {
  readonly rateLimit: RateLimiter.RateLimitPolicy
}

/** Restores a cell: bumps its durable generation, builds its limiter. */
export const make = (id: CellId, options: CellOptions) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ cell_generation: number }>`
      UPDATE environments SET cell_generation = cell_generation + 1
      WHERE tenant_id = ${id.tenantId} AND name = ${id.environment}
      RETURNING cell_generation`.pipe(Effect.orDie)
    const generation = rows[0]?.cell_generation ?? 0
    const limiter = yield* RateLimiter.make(options.rateLimit)
    const policy = RateLimiter.policyHeader(options.rateLimit)
    const lastUsed = yield* Ref.make(yield* Clock.currentTimeMillis)

    const handle = <C extends CellCommand>(command: C): Effect.Effect<ReplyOf<C>> => {
      const reply: Effect.Effect<unknown> = (() => {
        switch (command._tag) {
          case "AdmitRequest":
            return Effect.map(limiter.take, (d) => ({ ...d, policy, state: RateLimiter.stateHeader(d) }))
          case "GetGeneration":
            return Effect.succeed(generation)
        }
      })()
      return Effect.zipLeft(
        reply as Effect.Effect<ReplyOf<C>>,
        Effect.flatMap(Clock.currentTimeMillis, (now) => Ref.set(lastUsed, now))
      )
    }
    yield* Effect.logDebug("cell restored").pipe(Effect.annotateLogs({ cell: `${id.tenantId}/${id.environment}`, generation }))
    return { id, generation, lastUsed, handle } satisfies Cell
  })
