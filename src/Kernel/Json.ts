/** JSON helpers shared by the idempotency fingerprint and content hashes. */

/** Canonical JSON: keys sorted, no whitespace, so key order never changes the fingerprint. */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value !== "object") return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  const entries = Object.keys(value as object)
    .sort()
    .filter((k) => (value as any)[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as any)[k])}`)
  return `{${entries.join(",")}}`
}
