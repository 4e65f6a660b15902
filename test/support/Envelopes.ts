/** Assertions on the contract's envelopes (2.2, D3): exact keys, and `request_id` = `X-Request-Id`. */
import { expect } from "@effect/vitest"
import type { Reply } from "./Client.js"

/** An error envelope `{error:{type, code, message, param?}, request_id}` and nothing else. */
export const expectError = (res: Reply, status: number, type: string, code?: string, param?: string) => {
  expect(res.status, res.text).toBe(status)
  expect(Object.keys(res.body).sort()).toEqual(["error", "request_id"])
  expect(res.body.error.type, res.text).toBe(type)
  if (code !== undefined) expect(res.body.error.code, res.text).toBe(code)
  if (param !== undefined) expect(res.body.error.param, res.text).toBe(param)
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
}

/** A single-resource envelope `{data, request_id}` and nothing else; returns `data`. */
export const expectSingle = (res: Reply, status = 200) => {
  expect(res.status, res.text).toBe(status)
  expect(Object.keys(res.body).sort()).toEqual(["data", "request_id"])
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
  return res.body.data
}

/** A list envelope `{items, next_cursor, request_id}` and nothing else. */
export const expectList = (res: Reply) => {
  expect(res.status, res.text).toBe(200)
  expect(Object.keys(res.body).sort()).toEqual(["items", "next_cursor", "request_id"])
  expect(res.body.request_id).toBe(res.headers.get("x-request-id"))
  return res.body as { items: Array<any>; next_cursor: string | null }
}
