/**
 * Assertions on the contract's envelopes (2.2, D3) and the headers every response carries (D4):
 * exact keys, `request_id` = `X-Request-Id`, `Cache-Control: no-store`, and the D3 error type of
 * each status.
 */
import { expect } from "@effect/vitest"
import type { Reply } from "./Client.js"

/** What a request id may be (D4): 1..128 characters of [A-Za-z0-9._-]. */
export const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/

/** The D3 error type of each status. */
export const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found",
  405: "invalid_request", // not in D3's list: a documented path with a method it does not have (issue 15)
  409: "conflict",
  410: "gone",
  429: "rate_limited",
  503: "unavailable"
}

export const keysOf = (o: unknown) => Object.keys(o as object).sort()

/** Headers every response carries (D4). */
export const expectCommonHeaders = (res: Reply) => {
  expect(res.headers.get("cache-control")).toBe("no-store")
  expect(res.headers.get("x-request-id")).toMatch(REQUEST_ID)
}

/** A single-resource envelope `{data, request_id}` and nothing else; returns `data`. */
export const expectSingle = (res: Reply, status = 200) => {
  expect(res.status, res.text).toBe(status)
  expectCommonHeaders(res)
  expect(keysOf(res.body)).toEqual(["data", "request_id"])
  expect(res.body.data).toBeTypeOf("object")
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
  return res.body.data
}

/** A list envelope `{items, next_cursor, request_id}` and nothing else; returns it. */
export const expectList = (res: Reply) => {
  expect(res.status, res.text).toBe(200)
  expectCommonHeaders(res)
  expect(keysOf(res.body)).toEqual(["items", "next_cursor", "request_id"])
  expect(Array.isArray(res.body.items)).toBe(true)
  expect(res.body.next_cursor === null || typeof res.body.next_cursor === "string").toBe(true)
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
  return res.body as { items: Array<any>; next_cursor: string | null }
}

/**
 * An error envelope `{error:{type, code, message, param?}, request_id}` and nothing else, with the
 * D3 type of `status`, a code and a message.
 */
const expectErrorEnvelope = (res: Reply, status: number) => {
  expect(res.status, res.text).toBe(status)
  expectCommonHeaders(res)
  expect(res.headers.get("content-type")).toMatch(/^application\/json/)
  expect(keysOf(res.body)).toEqual(["error", "request_id"])
  expect(["code,message,param,type", "code,message,type"]).toContain(keysOf(res.body.error).join(","))
  expect(res.body.error.type, res.text).toBe(ERROR_TYPES[status])
  expect(res.body.error.code).toBeTypeOf("string")
  expect(res.body.error.code.length).toBeGreaterThan(0)
  expect(res.body.error.message).toBeTypeOf("string")
  expect(res.body.error.message.length).toBeGreaterThan(0)
  if ("param" in res.body.error) expect(res.body.error.param).toBeTypeOf("string")
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
}

/** The error envelope of `status`, with this `code` when given. */
export const expectErrorCode = (res: Reply, status: number, code?: string) => {
  expectErrorEnvelope(res, status)
  if (code !== undefined) expect(res.body.error.code, res.text).toBe(code)
}

/** The error envelope of `status`, naming its `type`; with this `code` and `param` when given. */
export const expectError = (res: Reply, status: number, type: string, code?: string, param?: string) => {
  expectErrorEnvelope(res, status)
  expect(res.body.error.type, res.text).toBe(type)
  if (code !== undefined) expect(res.body.error.code, res.text).toBe(code)
  if (param !== undefined) expect(res.body.error.param, res.text).toBe(param)
}
