/**
 * The key that encrypts credentials at rest (SECRETS_KEY or DATA_DIR/secrets-key): generated once
 * with mode 0600 and reused, or configured (hex or base64); a wrong length refuses the start with
 * a clear message that never shows the key.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AppConfig } from "../src/Config/AppConfig.js"
import { Secrets, secretsKeyFile } from "../src/Crypto/Secrets.js"

describe("Secrets key (SECRETS_KEY / DATA_DIR/secrets-key)", () => {
  const secretsWith = (overrides: Parameters<typeof AppConfig.defaults>[0]) =>
    Secrets.Default.pipe(Layer.provide(Layer.succeed(AppConfig, AppConfig.defaults(overrides))))

  it.effect("generated once into DATA_DIR with mode 0600 and reused", () =>
    Effect.gen(function*() {
      const dataDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-secrets-")), "nested")
      const first = yield* Effect.provide(Secrets, secretsWith({ dataDir }))
      expect(first.source).toBe("generated")
      const file = secretsKeyFile(dataDir)
      expect(fs.statSync(file).mode & 0o777).toBe(0o600)
      expect(Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64").length).toBe(32)
      const sealed = yield* first.encrypt("hello", "ctx")
      expect(sealed.iv.length).toBe(12)
      const again = yield* first.encrypt("hello", "ctx")
      expect(Buffer.from(again.iv).equals(Buffer.from(sealed.iv))).toBe(false)

      const before = fs.readFileSync(file, "utf8")
      const second = yield* Effect.provide(Secrets, secretsWith({ dataDir }))
      expect(second.source).toBe("file")
      expect(fs.readFileSync(file, "utf8")).toBe(before)
      expect(Redacted.value(yield* second.decrypt(sealed, "ctx"))).toBe("hello")
      fs.rmSync(path.dirname(dataDir), { recursive: true, force: true })
    }))

  it.effect("SECRETS_KEY from config (hex or base64); a wrong length fails at start with a clear message", () =>
    Effect.gen(function*() {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-secrets-"))
      const raw = randomBytes(32)
      const hex = yield* Effect.provide(Secrets, secretsWith({ dataDir, secretsKey: Option.some(Redacted.make(raw.toString("hex"))) }))
      const b64 = yield* Effect.provide(Secrets, secretsWith({ dataDir, secretsKey: Option.some(Redacted.make(raw.toString("base64"))) }))
      expect(hex.source).toBe("config")
      expect(Redacted.value(yield* b64.decrypt(yield* hex.encrypt("x", "c"), "c"))).toBe("x")
      // Configured: no file is written.
      expect(fs.existsSync(secretsKeyFile(dataDir))).toBe(false)

      const short = randomBytes(16).toString("base64")
      const loaded = yield* Effect.exit(
        Effect.withConfigProvider(AppConfig.config, ConfigProvider.fromMap(new Map([["SECRETS_KEY", short]])))
      )
      expect(Exit.isFailure(loaded)).toBe(true)
      const message = String(Exit.isFailure(loaded) ? loaded.cause : "")
      expect(message).toContain("SECRETS_KEY must be 32 bytes")
      expect(message).not.toContain(short)
      const ok = yield* Effect.withConfigProvider(
        AppConfig.config,
        ConfigProvider.fromMap(new Map([["SECRETS_KEY", raw.toString("hex")]]))
      )
      expect(Option.isSome(ok.secretsKey)).toBe(true)
      // AppConfig built by hand with a bad key: the service refuses to start.
      const refused = yield* Effect.exit(
        Effect.provide(Secrets, secretsWith({ dataDir, secretsKey: Option.some(Redacted.make(short)) }))
      )
      expect(Exit.isFailure(refused)).toBe(true)
      fs.rmSync(dataDir, { recursive: true, force: true })
    }))
})
