/** The HTTP of a file download (RFC 9110, RFC 6266): one byte range, and the attachment's name. */

/** Inclusive byte offsets. */
export interface ByteRange {
  readonly start: number
  readonly end: number
}

/**
 * A `Range` header against a resource of `size` bytes: the one range it asks for, `unsatisfiable`
 * when it starts past the end, or undefined when there is none to honour (absent, not `bytes=`,
 * malformed, or several ranges: the whole resource is served, as RFC 9110 allows).
 */
export const parseRange = (header: string | undefined, size: number): ByteRange | "unsatisfiable" | undefined => {
  if (header === undefined) return undefined
  const match = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header)
  if (match === null) return undefined
  const [, first = "", last = ""] = match
  if (first === "" && last === "") return undefined
  if (first === "") {
    // the last N bytes
    const n = Number(last)
    if (n === 0) return "unsatisfiable"
    return size === 0 ? "unsatisfiable" : { start: Math.max(0, size - n), end: size - 1 }
  }
  const start = Number(first)
  const end = last === "" ? size - 1 : Number(last)
  if (last !== "" && end < start) return undefined
  if (start >= size) return "unsatisfiable"
  return { start, end: Math.min(end, size - 1) }
}

/** RFC 5987 value characters: everything else is percent-encoded. */
const encodeExt = (s: string) => encodeURIComponent(s).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

/** `attachment; filename="<ASCII fallback>"; filename*=UTF-8''<the name, percent-encoded>`. */
export const contentDisposition = (filename: string): string => {
  const fallback = filename.replace(/[^\x20-\x7E]/g, "_").replace(/["\\]/g, "_")
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encodeExt(filename)}`
}
