/**
 * The one way capabilities reach the runtime: send a command of the cell protocol to the cell of
 * a tenant/environment and await its reply. The implementation (src/Runtime/CellsLive.ts) makes
 * each cell an `@effect/cluster` entity (src/Cells/Entity.ts), owned by one runner of the cluster
 * at a time; callers depend only on this tag and the protocol's schemas, on whichever node.
 */
import { Context, Data, Effect, Option } from "effect"

import type { CellId, CellTag, Command, Reply } from "./Protocol.js"

/**
 * The cell could not be reached in time (its node died and it is moving to another, or the
 * cluster is starting): a defect the HTTP edge answers with 503 `unavailable` and `Retry-After`.
 * Nothing was changed by the request that met it, except what it had committed before.
 */
export class CellUnavailable extends Data.TaggedError("CellUnavailable")<{
  readonly cell: string
  readonly reason: string
}> {}

export interface CellsShape {
  /** Sends a command to the cell of `id` (starting it if needed) and awaits the reply. */
  readonly send: <K extends CellTag>(id: CellId, command: Command<K>) => Effect.Effect<Reply<K>>
  /** Like `send`, to a cell that is running (on any node) only: none when it is not (nothing is started). */
  readonly sendIfRunning: <K extends CellTag>(id: CellId, command: Command<K>) => Effect.Effect<Option.Option<Reply<K>>>
  /** Cells running on this node. */
  readonly activeCount: Effect.Effect<number>
}

export class Cells extends Context.Tag("Cells")<Cells, CellsShape>() {}

/**
 * Sends a command whose effect is also reached from Postgres when the cell (re)starts, such as
 * starting a committed run's actor: if the cell cannot be reached now, the command is logged and
 * dropped, since the cell's next start (on whichever node) resumes every unfinished run.
 */
export const tell = <K extends CellTag>(id: CellId, command: Command<K>): Effect.Effect<void, never, Cells> =>
  Effect.flatMap(Cells, (cells) => tellVia(cells, id, command))

/** `tell` through `cells` (a caller that holds the service: nothing provided per command). */
export const tellVia = <K extends CellTag>(cells: CellsShape, id: CellId, command: Command<K>): Effect.Effect<void> =>
  cells.send(id, command).pipe(
    Effect.asVoid,
    Effect.catchSomeDefect((defect) =>
      defect instanceof CellUnavailable
        ? Option.some(
          Effect.logWarning(`${command._tag} not delivered now (${defect.reason}); the cell resumes it from the database when it starts`)
        )
        : Option.none()
    )
  )
