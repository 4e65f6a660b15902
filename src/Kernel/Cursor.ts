/**
 * Opaque list cursors (D6): base64url of `{l: list, c: tenant/environment, k: last id}`. Keyset
 * pagination over time-ordered ids, newest first, so concurrent inserts never cause duplicates or
 * skips. A cursor of another list, tenant or environment, or a malformed one, is 400 `invalid_cursor`.
 */
import { Effect, Schema } from "effect"

import { InvalidRequest } from "./Errors.js"
import { cellKey } from "./Principal.js"

export const ListParams = Schema.Struct({
  limit: Schema.optional(
    Schema.String.pipe(
      Schema.pattern(/^(100|[1-9][0-9]?)$/, { message: () => "must be an integer from 1 to 100" }),
      Schema.compose(Schema.NumberFromString),
      Schema.int({ message: () => "must be an integer from 1 to 100" }),
      Schema.between(1, 100, { message: () => "must be an integer from 1 to 100" })
    )
  ).annotations({ description: "Page size, 1 to 100 (default 50)" }),
  cursor: Schema.optional(Schema.String).annotations({ description: "The `next_cursor` of the previous page (empty: the first page)" })
})
export type ListParams = typeof ListParams.Type

export const DEFAULT_LIMIT = 50

const invalid = new InvalidRequest({
  code: "invalid_cursor",
  message: "The cursor is malformed or belongs to another list",
  param: "cursor"
})

export const encode = (list: string, cell: string, lastId: string): string =>
  Buffer.from(JSON.stringify({ l: list, c: cell, k: lastId })).toString("base64url")

export const decode = (cursor: string | undefined, list: string, cell: string): Effect.Effect<string | undefined, InvalidRequest> =>
  Effect.suspend(() => {
    // `cursor=` (empty) is the first page, as no cursor is: what a client sends for "no cursor yet"
    if (cursor === undefined || cursor === "") return Effect.succeed(undefined)
    try {
      const v = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"))
      if (v && v.l === list && v.c === cell && typeof v.k === "string") return Effect.succeed(v.k as string)
    } catch {
      // fallthrough
    }
    return Effect.fail(invalid)
  })

/** Turns `limit + 1` fetched rows into a page. */
export const page = <Row extends { id: string }, A>(
  rows: ReadonlyArray<Row>,
  limit: number,
  list: string,
  cell: string,
  toResource: (row: Row) => A
) => {
  const items = rows.slice(0, limit)
  const more = rows.length > limit
  return {
    items: items.map(toResource),
    next_cursor: more ? encode(list, cell, items[items.length - 1]!.id) : null
  }
}

/** One keyset page of a list of the caller's cell (D6): decode the cursor, fetch `limit + 1`, page. */
export const listPage = <Row extends { id: string }, A, E>(
  list: string,
  fetch: (tenantId: string, environment: string, after: string | undefined, limit: number) => Effect.Effect<ReadonlyArray<Row>, E>,
  toResource: (row: Row) => A
) =>
(p: { readonly tenantId: string; readonly environment: string }, params: ListParams) =>
  Effect.gen(function*() {
    const cell = cellKey(p)
    const after = yield* decode(params.cursor, list, cell)
    const limit = params.limit ?? DEFAULT_LIMIT
    const rows = yield* fetch(p.tenantId, p.environment, after, limit)
    return page(rows, limit, list, cell, toResource)
  })
