/**
 * What a run actor gives the resolution of a tool call (src/Runtime/ToolCalls.ts, and the built-in
 * memory tools of src/Runtime/MemoryTools.ts): its own file, so that neither of those imports the other.
 */
import type { SqlError } from "@effect/sql/SqlError"
import type { Effect } from "effect"

import type { ConversationItem } from "../Domain/Conversation.js"
import type { Trigger } from "../Domain/RunState.js"
import type { Commit, RunRow } from "../Runs.js"
import type { ToolRow } from "../Tools.js"

export type ProposedCall = Extract<ConversationItem, { type: "tool_call" }>

/** What the actor does after a call: go on, or stop (waiting for a human, or the run is over). */
export type Next = "continue" | "stop"

export interface ToolCallEnv {
  readonly row: RunRow
  readonly tools: ReadonlyArray<ToolRow>
  readonly cellGeneration: number
  /** Commits to the run; false when the state machine refused (someone else changed the run). */
  readonly commit: (...commits: ReadonlyArray<Commit>) => Effect.Effect<boolean, SqlError>
  /** Whether the run's key and user may still dispatch. */
  /** The trigger that ends the run when its key, user or environment may no longer act (undefined: go on). */
  readonly unauthorized: Effect.Effect<Trigger | undefined, SqlError>
  /** Asks the cell to revive the actor at this time (approval expiry). */
  readonly wakeAt: (at: Date) => Effect.Effect<void>
  /** The revision offers the built-in memory tools (D14, src/Runtime/MemoryTools.ts). */
  readonly memory: boolean
  /** The cell's `storage_bytes` quota now (D20: `memory_put` values count toward it). */
  readonly storageLimit: Effect.Effect<number>
}
