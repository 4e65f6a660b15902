/**
 * What every operator CLI command shares: the `--url` and `--json` options, the call to the
 * operator plane with the operator token, and the output (`key: value` lines for a person, plain
 * text off a terminal or with NO_COLOR, the JSON itself with `--json`).
 */
import { Options } from "@effect/cli"
import { Console, Effect, Option } from "effect"

import { dataDirOf, serviceUrl } from "./LocalFiles.js"
import { readTokenFile } from "./Token.js"

export const url = Options.text("url").pipe(
  Options.withDescription(
    "Base URL of the running server (default: OPERATOR_URL, else the service running on DATA_DIR (its service.json), else http://127.0.0.1:$PORT)"
  ),
  Options.optional
)

export class CliError extends Error {}

export const rootOf = (base: Option.Option<string>) => serviceUrl(Option.getOrUndefined(base) ?? process.env.OPERATOR_URL)

export const call = (base: Option.Option<string>, method: string, path: string, body?: unknown) =>
  Effect.gen(function*() {
    const root = rootOf(base)
    const envToken = process.env.OPERATOR_TOKEN
    const token = envToken && envToken.length > 0
      ? envToken
      : Option.getOrElse(yield* readTokenFile(dataDirOf()), () => "")
    if (token === "") {
      return yield* Effect.fail(new CliError("No operator token: set OPERATOR_TOKEN or DATA_DIR (where the server stored operator-token)"))
    }
    const res = yield* Effect.tryPromise({
      try: () =>
        fetch(`${root}/operator/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {})
        }),
      catch: (e) => new CliError(`Cannot reach ${root}: ${String(e)}`)
    })
    const answer = yield* Effect.promise(() => res.json().catch(() => ({})))
    if (!res.ok) {
      return yield* Effect.fail(new CliError(`${method} ${path} -> ${res.status}: ${JSON.stringify(answer)}`))
    }
    return answer as any
  })

export const json = Options.boolean("json").pipe(Options.withDescription("Print the answer as JSON (for scripts)"))

const isScalar = (v: unknown) => v === null || typeof v !== "object"
const scalar = (v: unknown) => (typeof v === "string" ? v : JSON.stringify(v))

/**
 * `key: value` lines, nested objects indented, a list of plain values on one line separated by
 * commas (what a person reads); `--json`: the JSON itself.
 */
export const readable = (value: unknown, indent = ""): string =>
  value !== null && typeof value === "object"
    ? Object.entries(value).map(([k, v]) =>
      Array.isArray(v) && v.every(isScalar)
        ? `${indent}${k}: ${v.map(scalar).join(", ")}`
        : v !== null && typeof v === "object" && Object.keys(v).length > 0
        ? `${indent}${k}:\n${readable(v, `${indent}  `)}`
        : `${indent}${k}: ${scalar(v)}`
    ).join("\n")
    : `${indent}${String(value)}`

export const printer = (asJson: boolean) => (value: unknown) => Console.log(asJson ? JSON.stringify(value, null, 2) : readable(value))

/** A page of a list: each item as `key: value` lines, a blank line between (or `--json`: the page). */
export const printPage = (asJson: boolean) => (page: { items: ReadonlyArray<unknown>; next_cursor: string | null }) =>
  asJson
    ? Console.log(JSON.stringify(page, null, 2))
    : Console.log(
      page.items.length === 0 ? "(none)" : page.items.map((item) => readable(item)).join("\n\n") +
        (page.next_cursor === null ? "" : `\n\n(more: --cursor ${page.next_cursor})`)
    )

/** Off a terminal (piped, redirected) or with NO_COLOR, output is plain text: no ANSI escapes. */
export const plain = !process.stdout.isTTY || (process.env.NO_COLOR ?? "") !== ""
const ANSI = /\x1b\[[0-9;]*m/g
const unstyled = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? a.replace(ANSI, "") : a))
export const plainOf = (current: Console.Console): Console.Console => ({
  ...current,
  log: (...args) => current.log(...unstyled(args)),
  error: (...args) => current.error(...unstyled(args)),
  unsafe: {
    ...current.unsafe,
    log: (...args) => current.unsafe.log(...unstyled(args)),
    error: (...args) => current.unsafe.error(...unstyled(args))
  }
})
