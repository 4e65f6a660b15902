/**
 * The pure helpers of idempotency (D5, src/Edge/Idempotency.ts): valid keys, canonical JSON, the
 * request fingerprint, which statuses are stored, and secrets redacted from stored responses.
 */
import { describe, expect, it } from "@effect/vitest"
import { fingerprint, isStored, redactSecrets, validKey } from "../src/Edge/Idempotency.js"
import { canonicalJson } from "../src/Kernel/Json.js"

describe("Idempotency helpers", () => {
  it("validKey: 1..255 characters of 0x21..0x7E", () => {
    expect(validKey("a")).toBe(true)
    expect(validKey("!~")).toBe(true)
    expect(validKey("x".repeat(255))).toBe(true)
    expect(validKey("")).toBe(false)
    expect(validKey("x".repeat(256))).toBe(false)
    expect(validKey("has space")).toBe(false)
    expect(validKey("tab\there")).toBe(false)
    expect(validKey("del\x7f")).toBe(false)
    expect(validKey("é")).toBe(false)
  })

  it("canonicalJson sorts keys at every depth and drops no array elements", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null } })).toBe(
      `{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}`
    )
    expect(canonicalJson([{ b: 1, a: 2 }, "s"])).toBe(`[{"a":2,"b":1},"s"]`)
  })

  it("fingerprint: key order and whitespace do not count; method, path and values do", () => {
    const a = fingerprint("POST", "/v1/x", `{"a":1,"b":{"c":2,"d":3}}`)
    expect(fingerprint("POST", "/v1/x", ` { "b" : { "d":3, "c":2 }, "a" : 1 } `)).toBe(a)
    expect(fingerprint("POST", "/v1/x", `{"a":1,"b":{"c":2,"d":4}}`)).not.toBe(a)
    expect(fingerprint("PATCH", "/v1/x", `{"a":1,"b":{"c":2,"d":3}}`)).not.toBe(a)
    expect(fingerprint("POST", "/v1/y", `{"a":1,"b":{"c":2,"d":3}}`)).not.toBe(a)
    // an empty body and a non-JSON body are fingerprinted as they are
    expect(fingerprint("POST", "/v1/x", "")).not.toBe(fingerprint("POST", "/v1/x", "{}"))
    expect(fingerprint("POST", "/v1/x", "not json")).toBe(fingerprint("POST", "/v1/x", "not json"))
  })

  it("isStored: 2xx, 404, 409, 410 are kept; 400, 401, 403, 429, 500, 503 are released", () => {
    for (const s of [200, 201, 202, 404, 409, 410]) expect([s, isStored(s)]).toEqual([s, true])
    for (const s of [400, 401, 403, 429, 500, 503]) expect([s, isStored(s)]).toEqual([s, false])
  })

  it("redactSecrets: every string `secret` becomes null, at any depth; the rest is untouched", () => {
    const original = {
      data: { id: "key_1", secret: "sk_live_abc", scopes: ["a"], nested: { secret: "whsec_x", name: "n" } },
      items: [{ secret: "one", id: 1 }, { id: 2 }, "secret"],
      request_id: "req_1",
      not_secret: "visible"
    }
    const copy = JSON.parse(JSON.stringify(original))
    expect(redactSecrets(original)).toEqual({
      data: { id: "key_1", secret: null, scopes: ["a"], nested: { secret: null, name: "n" } },
      items: [{ secret: null, id: 1 }, { id: 2 }, "secret"],
      request_id: "req_1",
      not_secret: "visible"
    })
    expect(original).toEqual(copy) // not mutated
    expect(redactSecrets({ secret: null })).toEqual({ secret: null })
    expect(redactSecrets("secret")).toBe("secret")
    expect(JSON.stringify(redactSecrets({ data: { secret: "s" } }))).not.toContain(`"s"`)
  })
})
