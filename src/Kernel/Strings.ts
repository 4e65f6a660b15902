/**
 * String building blocks of request schemas (D19). Names, ids and other single-line strings
 * refuse control characters (C0, DEL, C1); free text (instructions, run input, descriptions)
 * may hold tab, LF and CR, which the request pipeline already enforces for every string of a body.
 */
import { Schema } from "effect"

const CONTROL = /[\u0000-\u001F\u007F-\u009F]/

/** What free text (and any key or string of a JSON body) may not hold (D19): C0 but tab, LF and CR; a lone surrogate. */
export const FORBIDDEN_IN_TEXT = /[\u0000-\u0008\u000B\u000C\u000E-\u001F]|\p{Cs}/u

/** How deep JSON may nest (D19: the top-level object or array is level 1). */
export const MAX_JSON_DEPTH = 64

/** A string of one line: no control characters at all. */
export const SingleLine = Schema.String.pipe(
  Schema.filter((s) => !CONTROL.test(s), {
    message: () => "must not contain control characters",
    jsonSchema: { pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F]*$" }
  })
)

/** An id given as a filter or reference (a query parameter, a body field naming a resource): 1-128 characters, one line. */
export const RefString = SingleLine.pipe(Schema.minLength(1), Schema.maxLength(128))
