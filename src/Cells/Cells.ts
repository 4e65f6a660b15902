/**
 * The one way capabilities reach the runtime: send a command of the cell protocol to the cell of
 * a tenant/environment and await its reply. The implementation (src/Runtime/CellsLive.ts) owns the
 * cells; callers depend only on this tag and the protocol's schemas, as `@effect/cluster` callers
 * reach an entity through its RPC group, never through the runner.
 */
import { Context, type Effect, type Option } from "effect"

import type { CellCommand, CellId, ReplyOf } from "./Protocol.js"

export interface CellsShape {
  /** Sends a command to the cell of `id` (starting it if needed) and awaits the reply. */
  readonly send: <C extends CellCommand>(id: CellId, command: C) => Effect.Effect<ReplyOf<C>>
  /** Like `send`, to a cell that is running (or starting) only: none when it is not (nothing is started). */
  readonly sendIfRunning: <C extends CellCommand>(id: CellId, command: C) => Effect.Effect<Option.Option<ReplyOf<C>>>
  /** Stops a cell now (e.g. its environment was deleted). */
  readonly stop: (id: CellId) => Effect.Effect<void>
  /** Cells running in this process. */
  readonly activeCount: Effect.Effect<number>
}

export class Cells extends Context.Tag("Cells")<Cells, CellsShape>() {}
