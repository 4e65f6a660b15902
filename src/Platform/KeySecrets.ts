/**
 * Service key secrets: `sk_<environment>_<43 chars of base64url>` (256 bits). Only the SHA-256 of
 * the secret is stored (a fast hash is right for high-entropy secrets); the first 16 characters are
 * kept as a display prefix.
 */
import { createHash, randomBytes } from "node:crypto"

import type { EnvironmentName } from "../Kernel/Ids.js"

export const generate = (environment: EnvironmentName): string =>
  `sk_${environment === "sandbox" ? "test" : "live"}_${randomBytes(32).toString("base64url")}`

export const hash = (secret: string): Buffer => createHash("sha256").update(secret, "utf8").digest()

export const prefixOf = (secret: string): string => secret.slice(0, 16)

/** Cheap syntax check so garbage never reaches the database. */
export const looksLikeKey = (s: string): boolean => /^sk_(test|live)_[A-Za-z0-9_-]{43}$/.test(s)
