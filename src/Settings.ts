/**
 * Operator-tunable configuration, read once through Effect `Config` (environment variables by
 * default). Tests replace the whole layer with `Layer.succeed(Settings, ...)`.
 */
import { Config, ConfigError, Context, Either, Layer, Option, Redacted } from "effect"

/**
 * `SECRETS_KEY`: 32 bytes as 64 hex characters or as base64 (standard or url-safe). Returns the
 * key bytes, or a message saying what is wrong (never the value).
 */
export const decodeSecretsKey = (value: string): Either.Either<Buffer, string> => {
  const text = value.trim()
  const bytes = /^[0-9a-fA-F]{64}$/.test(text)
    ? Buffer.from(text, "hex")
    : /^[A-Za-z0-9+/_-]+={0,2}$/.test(text)
    ? Buffer.from(text, "base64")
    : undefined
  if (bytes === undefined || bytes.length !== 32) {
    return Either.left(
      `SECRETS_KEY must be 32 bytes, given as 64 hex characters or as base64 (got ${
        bytes === undefined ? "neither hex nor base64" : `${bytes.length} bytes`
      })`
    )
  }
  return Either.right(bytes)
}

export interface SettingsShape {
  readonly port: number
  readonly host: string
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: string
  readonly operatorToken: Option.Option<Redacted.Redacted<string>>
  readonly publicBaseUrl: Option.Option<string>
  /** AES-256-GCM key for credentials at rest; unset: generated once into DATA_DIR/secrets-key */
  readonly secretsKey: Option.Option<Redacted.Redacted<string>>
  /** cell resources */
  readonly rateLimit: { readonly ratePerSecond: number; readonly burst: number }
  readonly cellIdleTimeoutSeconds: number
  readonly dbPoolSize: number
  /** idempotency replay window (D5: 7 days) and tombstone retention (contract part 8: 90 days) */
  readonly idempotencyTtlSeconds: number
  readonly tombstoneTtlSeconds: number
  /** how long an in-flight idempotency reservation may stay locked before it is presumed dead */
  readonly idempotencyLockSeconds: number
  /** deletion purge: delay before live data is purged (contract 4 rule 6: within 24 h) and the sweep interval */
  readonly purgeDelaySeconds: number
  readonly sweepIntervalSeconds: number
}

export class Settings extends Context.Tag("Settings")<Settings, SettingsShape>() {
  static readonly config = Config.all({
    port: Config.port("PORT").pipe(Config.withDefault(8080)),
    host: Config.string("HOST").pipe(Config.withDefault("127.0.0.1")),
    databaseUrl: Config.option(Config.redacted("DATABASE_URL")).pipe(
      Config.map(Option.filter((u) => Redacted.value(u).length > 0))
    ),
    dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./.data")),
    operatorToken: Config.option(Config.redacted("OPERATOR_TOKEN")).pipe(
      Config.map(Option.filter((u) => Redacted.value(u).length > 0))
    ),
    publicBaseUrl: Config.option(Config.string("PUBLIC_BASE_URL")),
    // Checked here, so a key of the wrong length stops the process at start with a clear message.
    secretsKey: Config.option(Config.redacted("SECRETS_KEY")).pipe(
      Config.map(Option.filter((k) => Redacted.value(k).trim().length > 0)),
      Config.mapOrFail((key) =>
        Option.match(key, {
          onNone: () => Either.right(key),
          onSome: (k) =>
            Either.mapBoth(decodeSecretsKey(Redacted.value(k)), {
              onLeft: (message) => ConfigError.InvalidData(["SECRETS_KEY"], message),
              onRight: () => key
            })
        })
      )
    ),
    // Checked here, at start: a cell's limiter refuses (dies on) a policy outside these bounds,
    // which would turn every /v1 request into a 500.
    rateLimit: Config.all({
      ratePerSecond: Config.number("CELL_RATE_LIMIT_RPS").pipe(
        Config.withDefault(60),
        Config.validate({ message: "CELL_RATE_LIMIT_RPS must be a number > 0", validation: (n) => Number.isFinite(n) && n > 0 })
      ),
      burst: Config.integer("CELL_RATE_LIMIT_BURST").pipe(
        Config.withDefault(120),
        Config.validate({ message: "CELL_RATE_LIMIT_BURST must be at least 1", validation: (n) => n >= 1 })
      )
    }),
    cellIdleTimeoutSeconds: Config.integer("CELL_IDLE_TIMEOUT_SECONDS").pipe(
      Config.withDefault(600),
      Config.validate({ message: "CELL_IDLE_TIMEOUT_SECONDS must be at least 1", validation: (n) => n >= 1 })
    ),
    // At least 2: migrations hold their advisory lock on one reserved connection and migrate on
    // another, so a pool of 1 would wait for itself forever at start.
    dbPoolSize: Config.integer("DB_POOL_SIZE").pipe(
      Config.withDefault(20),
      Config.validate({ message: "DB_POOL_SIZE must be at least 2", validation: (n) => n >= 2 })
    ),
    idempotencyTtlSeconds: Config.integer("IDEMPOTENCY_TTL_SECONDS").pipe(Config.withDefault(7 * 24 * 3600)),
    tombstoneTtlSeconds: Config.integer("TOMBSTONE_TTL_SECONDS").pipe(Config.withDefault(90 * 24 * 3600)),
    idempotencyLockSeconds: Config.integer("IDEMPOTENCY_LOCK_SECONDS").pipe(Config.withDefault(60)),
    purgeDelaySeconds: Config.integer("PURGE_DELAY_SECONDS").pipe(Config.withDefault(3600)),
    sweepIntervalSeconds: Config.integer("SWEEP_INTERVAL_SECONDS").pipe(Config.withDefault(60))
  })

  static readonly layer = Layer.effect(Settings, Settings.config)

  /** Defaults for tests and tools: the same values an unconfigured process gets. */
  static readonly defaults = (overrides: Partial<SettingsShape> = {}): SettingsShape => ({
    port: 0,
    host: "127.0.0.1",
    databaseUrl: Option.none(),
    dataDir: "./.data",
    operatorToken: Option.none(),
    publicBaseUrl: Option.none(),
    secretsKey: Option.none(),
    rateLimit: { ratePerSecond: 60, burst: 120 },
    cellIdleTimeoutSeconds: 600,
    dbPoolSize: 10,
    idempotencyTtlSeconds: 7 * 24 * 3600,
    tombstoneTtlSeconds: 90 * 24 * 3600,
    idempotencyLockSeconds: 60,
    purgeDelaySeconds: 3600,
    sweepIntervalSeconds: 60,
    ...overrides
  })
}

