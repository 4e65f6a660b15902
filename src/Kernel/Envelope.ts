/**
 * Success envelopes of contract 2.2. Handlers return the bare resource (or `{items, next_cursor}`);
 * the encoded side adds `request_id` from the current request, and nothing else.
 */
import { HttpApiSchema } from "@effect/platform"
import { Effect, ParseResult, Schema } from "effect"

import { requestId } from "./RequestId.js"

const RequestIdField = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128))

/** `{data, request_id}` on the wire; the resource in code. */
export const Single = <A, I>(resource: Schema.Schema<A, I>, status = 200) =>
  Schema.transformOrFail(
    Schema.Struct({ data: Schema.encodedSchema(resource), request_id: RequestIdField }),
    Schema.typeSchema(resource),
    {
      strict: false,
      decode: (body, _, ast) =>
        ParseResult.mapError(Schema.decodeUnknown(resource)(body.data), (e) => new ParseResult.Type(ast, body, e.message)),
      encode: (a, _, ast) =>
        Effect.zipWith(
          ParseResult.mapError(Schema.encode(resource)(a), (e) => new ParseResult.Type(ast, a, e.message)),
          requestId,
          (data, request_id) => ({ data, request_id })
        )
    }
  ).annotations(HttpApiSchema.annotations({ status }))

/** 202 Accepted: `{data, request_id}` (a deletion job, or a run). */
export const Accepted = <A, I>(resource: Schema.Schema<A, I>) => Single(resource, 202)

export interface Page<A> {
  readonly items: ReadonlyArray<A>
  readonly next_cursor: string | null
}

/** `{items, next_cursor, request_id}` on the wire. */
export const List = <A, I>(resource: Schema.Schema<A, I>) => {
  const page = Schema.Struct({ items: Schema.Array(resource), next_cursor: Schema.NullOr(Schema.String) })
  return Schema.transformOrFail(
    Schema.Struct({
      items: Schema.Array(Schema.encodedSchema(resource)),
      next_cursor: Schema.NullOr(Schema.String),
      request_id: RequestIdField
    }),
    Schema.typeSchema(page),
    {
      strict: false,
      decode: (body, _, ast) =>
        ParseResult.mapError(
          Schema.decodeUnknown(page)({ items: body.items, next_cursor: body.next_cursor }),
          (e) => new ParseResult.Type(ast, body, e.message)
        ),
      encode: (p, _, ast) =>
        Effect.zipWith(
          ParseResult.mapError(Schema.encode(page)(p), (e) => new ParseResult.Type(ast, p, e.message)),
          requestId,
          (enc, request_id) => ({ items: enc.items, next_cursor: enc.next_cursor, request_id })
        )
    }
  )
}
