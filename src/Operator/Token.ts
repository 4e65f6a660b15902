/**
 * The operator bearer token (D1): `OPERATOR_TOKEN` from config, or generated once into
 * `DATA_DIR/operator-token` (mode 0600) and reused on the next start. A token is at least 32
 * characters and never a published one (D20): `OPERATOR_TOKEN` is checked with the configuration
 * (src/Config/AppConfig.ts), a token file here; a generated token (`op_` and 32 random bytes,
 * 46 characters) passes both.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"

import { Effect, Option, Redacted } from "effect"

import { AppConfig, operatorTokenProblem } from "../Config/AppConfig.js"
import { findPublished, textCandidate } from "../Config/PublishedSecrets.js"
import { OperatorCredentials } from "../Kernel/Security.js"

export const tokenFile = (dataDir: string) => path.resolve(dataDir, "operator-token")

/** A new operator token: `op_` and 32 random bytes (base64url), 46 characters. */
export const generateToken = () => `op_${randomBytes(32).toString("base64url")}`

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
        // Written by hand, or by an older version: refused as OPERATOR_TOKEN would be.
        const problem = operatorTokenProblem(existing.value) ??
          findPublished([textCandidate("OPERATOR_TOKEN", existing.value)]).map((p) => `a published secret: ${p.where}`)[0]
        if (problem !== undefined) {
          return yield* Effect.dieMessage(`${tokenFile(config.dataDir)}: ${problem}; remove the file to have a token generated`)
        }
        token = Redacted.make(existing.value)
      } else {
        source = "generated"
        const value = generateToken()
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
    /**
     * Who a bearer token is on the operator plane: `operator` for the shared token, an operator
     * account's id for a live personal token (when the console's credentials are provided), else
     * undefined.
     */
    const whoIs = (candidate: string): Effect.Effect<string | undefined> =>
      verify(candidate)
        ? Effect.succeed("operator")
        : Effect.flatMap(
          Effect.serviceOption(OperatorCredentials),
          Option.match({ onNone: () => Effect.succeed(undefined), onSome: (credentials) => credentials.accountOf(candidate) })
        )
    return { token, source, file: tokenFile(config.dataDir), verify, whoIs } as const
  })
}) {}
