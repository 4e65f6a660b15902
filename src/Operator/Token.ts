/**
 * The operator bearer token (D1): `OPERATOR_TOKEN` from config, or generated once into
 * `DATA_DIR/operator-token` (mode 0600) and reused on the next start.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"

import { Effect, Option, Redacted } from "effect"

import { AppConfig } from "../Config/AppConfig.js"

export const tokenFile = (dataDir: string) => path.resolve(dataDir, "operator-token")

/** Reads the token file if there is one (used by the CLI too). */
export const readTokenFile = (dataDir: string) =>
  Effect.tryPromise(() => fs.readFile(tokenFile(dataDir), "utf8")).pipe(
    Effect.map((s) => s.trim()),
    Effect.option
  )

export class OperatorToken extends Effect.Service<OperatorToken>()("OperatorToken", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const configured = config.operatorToken
    let source: "config" | "file" | "generated" = "config"
    let token: Redacted.Redacted<string>
    if (Option.isSome(configured)) {
      token = configured.value
    } else {
      const existing = yield* readTokenFile(config.dataDir)
      if (Option.isSome(existing) && existing.value.length > 0) {
        source = "file"
        token = Redacted.make(existing.value)
      } else {
        source = "generated"
        const value = `op_${randomBytes(32).toString("base64url")}`
        yield* Effect.tryPromise(async () => {
          await fs.mkdir(config.dataDir, { recursive: true })
          // "wx": never overwrite a token another process wrote first.
          await fs.writeFile(tokenFile(config.dataDir), value + "\n", { mode: 0o600, flag: "wx" })
        }).pipe(Effect.orDie)
        token = Redacted.make(value)
      }
    }
    const expected = Buffer.from(Redacted.value(token))
    /** Constant-time comparison. */
    const verify = (candidate: string) => {
      const got = Buffer.from(candidate)
      return got.length === expected.length && timingSafeEqual(got, expected)
    }
    return { token, source, file: tokenFile(config.dataDir), verify } as const
  })
}) {}
