/**
 * A JSON request body's schema (D19): fields it does not name are refused (400 `unknown_parameter`
 * naming the field), as the OpenAPI document's `additionalProperties: false` promises. The parse
 * option applies to the nested objects too.
 */
import type { Schema } from "effect"

export const strictBody = <S extends Schema.Schema.Any>(schema: S): S =>
  schema.annotations({ parseOptions: { onExcessProperty: "error" } }) as S
