/**
 * Operator configuration of the model providers, read once through Effect `Config` (environment
 * variables by default):
 *   - `OPENAI_BASE_URL` (default `https://api.openai.com/v1`): where the `openai` provider's
 *     Responses API lives (`POST {base}/responses`).
 *   - `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`): where the `anthropic` provider's
 *     Messages API lives (`POST {base}/v1/messages`).
 *   - `MODEL_REQUEST_TIMEOUT_SECONDS` (default 120, 1 to 3600): how long one model call to a real
 *     provider may take, response body included; past it the call is abandoned (the request is
 *     aborted) and the step fails with `ModelUnavailable`. The `scripted` model is not subject to
 *     it (its sleeps are deliberate and bounded by the run's own budgets).
 *   - `MODEL_RESPONSE_MAX_BYTES` (default 10 MiB): a larger response body fails the step
 *     (`ModelInvalidResponse`), so a provider cannot make the service buffer without bound.
 *
 * `openai_compatible` has no operator base URL: each profile names its own (`settings.base_url`).
 *
 * Tests point the providers at local servers with `Layer.succeed(ModelsConfig, ModelsConfig.defaults({...}))`.
 */
import { Config, type ConfigError, Context, Layer } from "effect"

export interface ModelsConfigShape {
  readonly openaiBaseUrl: string
  readonly anthropicBaseUrl: string
  readonly requestTimeoutSeconds: number
  /** a provider's response body larger than this fails the step (`model_invalid_response`) */
  readonly responseMaxBytes: number
}

const isHttpUrl = (value: string): boolean => {
  try {
    const url = new URL(value)
    return (url.protocol === "http:" || url.protocol === "https:") && url.hostname.length > 0
  } catch {
    return false
  }
}

const baseUrl = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.map((value) => value.trim()),
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be an http or https URL`, validation: isHttpUrl })
  )

export const MAX_REQUEST_TIMEOUT_SECONDS = 3600

export class ModelsConfig extends Context.Tag("ModelsConfig")<ModelsConfig, ModelsConfigShape>() {
  static readonly config: Config.Config<ModelsConfigShape> = Config.all({
    openaiBaseUrl: baseUrl("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    anthropicBaseUrl: baseUrl("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    requestTimeoutSeconds: Config.integer("MODEL_REQUEST_TIMEOUT_SECONDS").pipe(
      Config.withDefault(120),
      Config.validate({
        message: `MODEL_REQUEST_TIMEOUT_SECONDS must be an integer from 1 to ${MAX_REQUEST_TIMEOUT_SECONDS}`,
        validation: (n) => n >= 1 && n <= MAX_REQUEST_TIMEOUT_SECONDS
      })
    ),
    responseMaxBytes: Config.integer("MODEL_RESPONSE_MAX_BYTES").pipe(
      Config.withDefault(10 * 1024 * 1024),
      Config.validate({
        message: "MODEL_RESPONSE_MAX_BYTES must be an integer from 65536 to 104857600",
        validation: (n) => n >= 65_536 && n <= 100 * 1024 * 1024
      })
    )
  })

  /** Reads the configuration (environment variables by default); a bad value stops the start. */
  static readonly layer: Layer.Layer<ModelsConfig, ConfigError.ConfigError> = Layer.effect(
    ModelsConfig,
    ModelsConfig.config
  )

  /** Defaults for tests and tools: the same values an unconfigured process gets. */
  static readonly defaults = (overrides: Partial<ModelsConfigShape> = {}): ModelsConfigShape => ({
    openaiBaseUrl: "https://api.openai.com/v1",
    anthropicBaseUrl: "https://api.anthropic.com",
    requestTimeoutSeconds: 120,
    responseMaxBytes: 10 * 1024 * 1024,
    ...overrides
  })

  /** A layer with the defaults and the given overrides (tests). */
  static readonly layerWith = (overrides: Partial<ModelsConfigShape> = {}): Layer.Layer<ModelsConfig> =>
    Layer.succeed(ModelsConfig, ModelsConfig.defaults(overrides))
}
