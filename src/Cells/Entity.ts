/**
 * The cell as an `@effect/cluster` entity: type "Cell", keyed by `tenant/environment`
 * (`cellKey`), made from the cell protocol's `RpcGroup` (src/Cells/Protocol.ts). Every message is
 * volatile (not persisted): what must outlive a node is already in Postgres (runs, events,
 * deliveries, schedules), and a volatile message that was in flight when a node died may be
 * delivered again to the cell's new owner, so every command is idempotent (admission spends a
 * token, which a retry spends again: at most one extra).
 */
import { Entity } from "@effect/cluster"

import { CellRpcs } from "./Protocol.js"

export const CellEntity = Entity.fromRpcGroup("Cell", CellRpcs)
