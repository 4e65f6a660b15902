/**
 * `pg`'s `Query` (a "submittable": `client.query` sends it as it is, and hands it each answer of
 * the backend), typed with what Pipelined.ts and GroupCommit.ts use of it (pg 8.23). `pg` ships
 * no type declarations.
 */
import { createRequire } from "node:module"

/** `pg`'s connection: its protocol writer and its per-connection statement bookkeeping. */
export interface Wire {
  readonly stream: { cork(): void; uncork(): void }
  readonly parsedStatements: Record<string, string>
  readonly submittedNamedStatements: Record<string, string>
  parse(query: { readonly text: string }): void
  bind(config?: object): void
  execute(config?: { readonly portal?: string; readonly rows?: number }): void
  sync(): void
}

export type Callback = (error: Error | null, result?: { readonly rows: ReadonlyArray<unknown> }) => void

export interface QueryShape {
  name: string | undefined
  readonly text: string
  readonly portal: string
  /** Writes the statement's messages (Parse unless the connection has it, Bind, Describe, then `_getRows`). */
  prepare(connection: Wire): void
  /** Writes its Execute and Sync. */
  _getRows(connection: Wire, rows: number | undefined): void
  hasBeenParsed(connection: Wire): boolean
  handleRowDescription(message: unknown): void
  handleDataRow(message: unknown): void
  handleCommandComplete(message: unknown, connection: Wire): void
  handleEmptyQuery(connection: Wire): void
  handleError(error: Error, connection: Wire): void
  handleReadyForQuery(connection: Wire): void
}

export const { Query } = createRequire(import.meta.url)("pg") as {
  readonly Query: new(config: {
    readonly name?: string | undefined
    readonly text: string
    readonly values: ReadonlyArray<unknown>
    readonly callback: Callback
  }) => QueryShape
}
