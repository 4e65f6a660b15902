/**
 * Hostile and oversized input (D19), refused at the edge before anything else reads it, for every
 * `/v1` operation now and later:
 *   - a body larger than the limit (1 MiB) is 400 `body_too_large`, answered without keeping the
 *     rest: a declared `Content-Length` over it is refused at once, a chunked body when it passes
 *     it. The rest is read and thrown away (`linger`) so the client, still sending, reads the 400
 *     rather than a reset connection;
 *   - a body that is not valid UTF-8, JSON nested deeper than 64 levels (the top-level value is
 *     level 1), U+0000 or a lone surrogate in any string or key, or a control character below
 *     U+0020 other than tab, LF and CR (names and other single-line fields refuse those too, in
 *     their schemas) is 400 `invalid_request` naming where;
 *   - U+0000, other control characters and malformed percent-encoding in the path or the query are
 *     400 `invalid_request`;
 *   - a body sent as anything but JSON (`Content-Type` other than `application/json`, or a
 *     charset other than UTF-8) is 400 `unsupported_content_type` before it is read; no
 *     `Content-Type` means JSON.
 * The body is read here once, checked, and handed to the HttpApi as the request's text.
 */
import { type HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"

import { InvalidRequest } from "../Kernel/Errors.js"
import { FORBIDDEN_IN_TEXT, MAX_JSON_DEPTH } from "../Kernel/Strings.js"

const tooLarge = (limit: number) =>
  new InvalidRequest({
    code: "body_too_large",
    message: `The request body is larger than ${limit} bytes`
  })

/** What a path segment or query value may not hold: any control character (C0, DEL, C1) or a lone surrogate. */
const FORBIDDEN_IN_LINE = /[\u0000-\u001F\u007F-\u009F]|\p{Cs}/u

const describeChar = (text: string, forbidden: RegExp) => {
  const match = text.match(forbidden)
  const code = match?.[0]?.codePointAt(0) ?? 0
  return code >= 0xd800 && code <= 0xdfff ? "a lone surrogate" : `U+${code.toString(16).toUpperCase().padStart(4, "0")}`
}

/** How long, and how much, of a refused body is read and thrown away before the connection closes. */
export const LINGER = { ms: 2_000, bytes: 64 * 1024 * 1024, closeAfterMs: 1_000 }

/**
 * A lingering close (as nginx's `lingering_close`) for a refused body: closing a socket while input
 * is unread resets the connection, and a client still sending the body would lose the 400 already
 * on its way. So the rest of the body is read and discarded: when it ends within `LINGER.ms` and
 * `LINGER.bytes`, the connection stays usable (keep-alive); otherwise, once the answer is written,
 * the server half-closes (the client reads the 400, then end of stream), keeps discarding, and
 * closes `LINGER.closeAfterMs` later. Memory stays flat: nothing read is kept.
 */
export const linger = (request: HttpServerRequest.HttpServerRequest) => {
  const source = NodeHttpServerRequest.toIncomingMessage(request)
  const response = NodeHttpServerRequest.toServerResponse(request)
  let read = 0
  let cut = false
  const cutOff = () => {
    if (cut || source.complete) return
    cut = true
    clearTimeout(timer)
    const close = () => {
      const socket = source.socket
      socket.end()
      setTimeout(() => socket.destroy(), LINGER.closeAfterMs).unref()
    }
    if (response.writableFinished) close()
    else response.once("finish", close).once("close", close)
  }
  const timer = setTimeout(cutOff, LINGER.ms)
  timer.unref()
  source.on("data", (chunk: Buffer) => {
    read += chunk.length
    if (read > LINGER.bytes) cutOff()
  })
  source.once("end", () => clearTimeout(timer))
  source.once("close", () => clearTimeout(timer))
  source.resume()
}

/**
 * Reads the body of `request` up to `limit` bytes. `undefined` when it is larger: the reading
 * stopped at the limit, and the rest is discarded (`linger`).
 */
const readLimited = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.async<Buffer | undefined, InvalidRequest>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let size = 0
    const done = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        done()
        linger(request)
        return resume(Effect.succeed(undefined))
      }
      chunks.push(chunk)
    }
    const onEnd = () => {
      done()
      resume(Effect.succeed(Buffer.concat(chunks)))
    }
    const onError = () => {
      done()
      resume(Effect.fail(new InvalidRequest({ code: "invalid_body", message: "The request body could not be read" })))
    }
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    return Effect.sync(done)
  })

/** The depth of the deepest array or object in `text`, scanning no further than `max + 1`. */
const tooDeep = (text: string, max: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92 /* \ */) i++
      else if (c === 34 /* " */) inString = false
    } else if (c === 34) {
      inString = true
    } else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max) return true
    } else if (c === 125 /* } */ || c === 93 /* ] */) {
      depth--
    }
  }
  return false
}

/** The first string (or key) of `value` that holds a forbidden character: where, and what. */
const badString = (value: unknown, path: Array<string | number>): { path: Array<string | number>; what: string } | undefined => {
  if (typeof value === "string") return FORBIDDEN_IN_TEXT.test(value) ? { path, what: describeChar(value, FORBIDDEN_IN_TEXT) } : undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = badString(value[i], [...path, i])
      if (found) return found
    }
    return undefined
  }
  if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      if (FORBIDDEN_IN_TEXT.test(key)) return { path: [...path, key], what: describeChar(key, FORBIDDEN_IN_TEXT) }
      const found = badString(item, [...path, key])
      if (found) return found
    }
  }
  return undefined
}

/** `application/json` in UTF-8 (no charset, or `utf-8`). */
const isJson = (contentType: string) => {
  const [type = "", ...parameters] = contentType.toLowerCase().split(";").map((s) => s.trim())
  if (type !== "application/json") return false
  return parameters.every((p) => !p.startsWith("charset=") || /^charset="?utf-?8"?$/.test(p))
}

const at = (path: Array<string | number>) => path.map(String).join(".")

/**
 * The body of a mutation, checked; it becomes the request's text, so the HttpApi decodes the same
 * bytes. A declared length over the limit is refused before anything is read.
 */
export const checkedBody = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.gen(function*() {
    const contentType = request.headers["content-type"]
    if (contentType !== undefined && !isJson(contentType)) {
      return yield* new InvalidRequest({
        code: "unsupported_content_type",
        message: "Send the request body as JSON, with `Content-Type: application/json`",
        param: "Content-Type"
      })
    }
    const declared = request.headers["content-length"]
    if (declared !== undefined && Number(declared) > limit) {
      linger(request)
      return yield* tooLarge(limit)
    }
    const bytes = yield* readLimited(request, limit)
    if (bytes === undefined) return yield* tooLarge(limit)
    let text: string
    try {
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes)
    } catch {
      return yield* new InvalidRequest({ code: "invalid_request", message: "The request body is not valid UTF-8" })
    }
    if (text.trim() !== "") {
      if (tooDeep(text, MAX_JSON_DEPTH)) {
        return yield* new InvalidRequest({
          code: "invalid_request",
          message: `The request body is nested deeper than ${MAX_JSON_DEPTH} levels`
        })
      }
      let parsed: unknown
      try {
        parsed = JSON.parse(text)
      } catch {
        parsed = undefined // not JSON: the HttpApi answers 400 invalid_body
      }
      const bad = parsed === undefined ? undefined : badString(parsed, [])
      if (bad !== undefined) {
        const param = at(bad.path)
        return yield* new InvalidRequest({
          code: "invalid_request",
          message: `${param || "The body"}: must not contain ${bad.what} (control characters other than tab, LF and CR are refused)`,
          ...(param === "" ? {} : { param })
        })
      }
    } // The HttpApi reads the body through the request's cached text: hand it the checked one.

    ;(request as unknown as { textEffect: Effect.Effect<string> }).textEffect = Effect.succeed(text)
    return text
  })

/** The path and query of `url`: control characters, U+0000 and malformed escapes are refused. */
export const checkUrl = (url: string): Effect.Effect<void, InvalidRequest> =>
  Effect.suspend(() => {
    const q = url.indexOf("?")
    const parts = [
      ...(q === -1 ? url : url.slice(0, q)).split("/"),
      ...(q === -1 ? [] : url.slice(q + 1).split(/[&=]/))
    ]
    for (const part of parts) {
      let decoded: string
      try {
        decoded = decodeURIComponent(part.replace(/\+/g, " "))
      } catch {
        return Effect.fail(new InvalidRequest({ code: "invalid_request", message: "The URL holds a malformed percent-encoding" }))
      }
      if (FORBIDDEN_IN_LINE.test(decoded)) {
        return Effect.fail(
          new InvalidRequest({ code: "invalid_request", message: `The URL must not contain ${describeChar(decoded, FORBIDDEN_IN_LINE)}` })
        )
      }
    }
    return Effect.void
  })
