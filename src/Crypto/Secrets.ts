/**
 * Encryption of stored credentials (model profile credentials, D12): AES-256-GCM with a random
 * 12-byte IV per value. The key is `SECRETS_KEY` from config (32 bytes, hex or base64), or, when
 * unset, generated once into `DATA_DIR/secrets-key` (mode 0600) and reused on the next start, like
 * the operator token. The key is never logged and never leaves this module.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"

import { Data, Effect, Either, Option, Redacted } from "effect"

import { AppConfig, decodeSecretsKey } from "../Config/AppConfig.js"

export const secretsKeyFile = (dataDir: string) => path.resolve(dataDir, "secrets-key")

/** One encrypted value as stored: ciphertext, the IV and the GCM authentication tag. */
export interface Sealed {
  readonly ciphertext: Uint8Array
  readonly iv: Uint8Array
  readonly tag: Uint8Array
}

/** A stored value that does not decrypt (wrong key, tampered row, or bound to another record). */
export class DecryptionFailed extends Data.TaggedError("DecryptionFailed")<{ readonly message: string }> {}

const loadOrCreateKeyFile = (dataDir: string) =>
  Effect.tryPromise({
    try: async () => {
      const file = secretsKeyFile(dataDir)
      const read = async () => (await fs.readFile(file, "utf8")).trim()
      try {
        return { text: await read(), source: "file" as const }
      } catch (e: any) {
        if (e?.code !== "ENOENT") throw e
      }
      const text = randomBytes(32).toString("base64")
      await fs.mkdir(dataDir, { recursive: true })
      try {
        // "wx": never overwrite a key another process wrote first; if one did, use that one.
        await fs.writeFile(file, text + "\n", { mode: 0o600, flag: "wx" })
        return { text, source: "generated" as const }
      } catch (e: any) {
        if (e?.code !== "EEXIST") throw e
        return { text: await read(), source: "file" as const }
      }
    },
    catch: (e) => new Error(`cannot read or create ${secretsKeyFile(dataDir)}: ${(e as Error)?.message ?? e}`)
  })

export class Secrets extends Effect.Service<Secrets>()("Secrets", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    let source: "config" | "file" | "generated" = "config"
    let text: Redacted.Redacted<string>
    if (Option.isSome(config.secretsKey)) {
      text = config.secretsKey.value
    } else {
      const loaded = yield* Effect.orDie(loadOrCreateKeyFile(config.dataDir))
      source = loaded.source
      text = Redacted.make(loaded.text)
    }
    const decoded = decodeSecretsKey(Redacted.value(text))
    if (Either.isLeft(decoded)) {
      return yield* Effect.dieMessage(
        source === "config" ? decoded.left : `${secretsKeyFile(config.dataDir)}: ${decoded.left}`
      )
    }
    const key = decoded.right

    /** Encrypts `plaintext`; `context` (e.g. the record's id) is bound as associated data. */
    const encrypt = (plaintext: string, context: string): Effect.Effect<Sealed> =>
      Effect.sync(() => {
        const iv = randomBytes(12)
        const cipher = createCipheriv("aes-256-gcm", key, iv)
        cipher.setAAD(Buffer.from(context, "utf8"))
        const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
        return { ciphertext, iv, tag: cipher.getAuthTag() }
      })

    /** Decrypts a sealed value made with the same `context`. */
    const decrypt = (sealed: Sealed, context: string): Effect.Effect<Redacted.Redacted<string>, DecryptionFailed> =>
      Effect.try({
        try: () => {
          const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(sealed.iv))
          decipher.setAAD(Buffer.from(context, "utf8"))
          decipher.setAuthTag(Buffer.from(sealed.tag))
          const plain = Buffer.concat([decipher.update(Buffer.from(sealed.ciphertext)), decipher.final()])
          return Redacted.make(plain.toString("utf8"))
        },
        catch: () => new DecryptionFailed({ message: "The stored value does not decrypt with this key" })
      })

    return { source, encrypt, decrypt } as const
  })
}) {}
