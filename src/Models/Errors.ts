/**
 * The typed failures of a model step and how provider failures map to them. Messages are built
 * here (never copied from a library error that could echo a request), a provider's own error text
 * is quoted only where that is safe, and the credential's value is scrubbed from every message.
 */
import type * as AiError from "@effect/ai/AiError"
import { Option, Redacted, Schema } from "effect"

const failureFields = {
  provider: Schema.String,
  message: Schema.String,
  provider_request_id: Schema.optional(Schema.String),
  retry_after_seconds: Schema.optional(Schema.Number)
}
/** HTTP 429: the provider is limiting our requests; `retry_after_seconds` when it said so. */
export class ModelRateLimited extends Schema.TaggedError<ModelRateLimited>()("ModelRateLimited", failureFields) {}
/** HTTP 5xx or 408, a timeout, or a connection failure: worth retrying later. */
export class ModelUnavailable extends Schema.TaggedError<ModelUnavailable>()("ModelUnavailable", failureFields) {}
/** A body that is not JSON or not the provider's shape, unparseable tool arguments, an unknown tool. */
export class ModelInvalidResponse extends Schema.TaggedError<ModelInvalidResponse>()("ModelInvalidResponse", failureFields) {}
/** HTTP 401/403, or no credential for a provider that needs one. */
export class ModelAuthFailed extends Schema.TaggedError<ModelAuthFailed>()("ModelAuthFailed", failureFields) {}
/** Anything else: the scripted `fail` step, other 4xx, an unusable profile. */
export class ModelFailed extends Schema.TaggedError<ModelFailed>()("ModelFailed", failureFields) {}

export const ModelError = Schema.Union(ModelRateLimited, ModelUnavailable, ModelInvalidResponse, ModelAuthFailed, ModelFailed)
export type ModelError = ModelRateLimited | ModelUnavailable | ModelInvalidResponse | ModelAuthFailed | ModelFailed

const MAX_MESSAGE = 1000
const MAX_PROVIDER_MESSAGE = 300

/** The provider's request id among response headers (lowercase names). */
export const requestIdOf = (headers: Readonly<Record<string, unknown>>): string | undefined => {
  for (const name of ["x-request-id", "request-id"]) {
    const value = headers[name]
    if (typeof value === "string" && value.length > 0) return value
  }
  return undefined
}

/** Seconds to wait from `retry-after-ms`, `retry-after` (seconds or an HTTP date). */
export const retryAfterSeconds = (headers: Readonly<Record<string, unknown>>, nowMillis: number): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (typeof ms === "string" && ms.trim() !== "" && Number.isFinite(Number(ms)) && Number(ms) >= 0) {
    return Math.ceil(Number(ms)) / 1000
  }
  const value = headers["retry-after"]
  if (typeof value !== "string" || value.trim() === "") return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds : undefined
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMillis) / 1000))
}

/** The provider's own error text from an error body (OpenAI, Anthropic, vLLM, FastAPI shapes). */
const providerMessageOf = (body: string | undefined): string | undefined => {
  if (body === undefined) return undefined
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  const pick = (value: unknown): string | undefined => typeof value === "string" && value.trim() !== "" ? value.trim() : undefined
  if (typeof parsed === "string") return pick(parsed)
  if (typeof parsed !== "object" || parsed === null) return undefined
  const record = parsed as Record<string, unknown>
  const error = record.error
  if (typeof error === "object" && error !== null) return pick((error as Record<string, unknown>).message)
  return pick(error) ?? pick(record.message) ?? pick(record.detail)
}

const truncate = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text)

/** Context for building error messages. */
export interface ErrorContext {
  /** Whether the provider's own error text may be quoted (not for customer-chosen base URLs). */
  readonly quoteProvider: boolean
  readonly nowMillis: number
}

/**
 * Maps an @effect/ai failure to a typed model error. Messages are built here; a provider's own
 * error text is quoted only when `quoteProvider` (and never for 401/403).
 */
export const toModelError = (provider: string, error: AiError.AiError, context: ErrorContext): ModelError => {
  const quote = (text: string | undefined) => context.quoteProvider && text !== undefined ? `: ${truncate(text, MAX_PROVIDER_MESSAGE)}` : ""
  switch (error._tag) {
    case "HttpResponseError": {
      const { headers, status } = error.response
      const id = requestIdOf(headers)
      const base = { provider, ...(id === undefined ? {} : { provider_request_id: id }) }
      if (status >= 200 && status < 300) {
        return new ModelInvalidResponse({
          ...base,
          message: error.reason === "EmptyBody"
            ? `${provider} sent an empty response body`
            : `${provider} sent a response body that is not valid JSON`
        })
      }
      const said = quote(providerMessageOf(error.body))
      if (status === 429) {
        const retry = retryAfterSeconds(headers, context.nowMillis)
        return new ModelRateLimited({
          ...base,
          message: `${provider} is rate limiting requests (HTTP 429)${said}`,
          ...(retry === undefined ? {} : { retry_after_seconds: retry })
        })
      }
      if (status === 401 || status === 403) {
        return new ModelAuthFailed({ ...base, message: `${provider} refused the credential (HTTP ${status})` })
      }
      if (status >= 500 || status === 408) {
        return new ModelUnavailable({ ...base, message: `${provider} is unavailable (HTTP ${status})${said}` })
      }
      if (status >= 300 && status < 400) {
        return new ModelFailed({ ...base, message: `${provider} answered with a redirect (HTTP ${status}), which is not followed` })
      }
      return new ModelFailed({ ...base, message: `${provider} refused the request (HTTP ${status})${said}` })
    }
    case "HttpRequestError":
      return error.reason === "Transport"
        ? new ModelUnavailable({ provider, message: `${provider} could not be reached` })
        : new ModelFailed({
          provider,
          message: error.reason === "InvalidUrl"
            ? `The ${provider} URL is not valid`
            : `The request to ${provider} could not be encoded`
        })
    case "MalformedOutput":
      return new ModelInvalidResponse({
        provider,
        message: `${provider} sent a response that could not be used${quote(error.description)}`
      })
    case "MalformedInput":
      return new ModelFailed({
        provider,
        message: `The conversation could not be sent to ${provider}${error.description ? `: ${error.description}` : ""}`
      })
    case "UnknownError":
      return new ModelFailed({ provider, message: error.description ?? `The ${provider} call failed` })
  }
}

/** The same error with the credential's value (if any) removed from its message. */
export const scrubbed = (error: ModelError, credential: Option.Option<Redacted.Redacted<string>>): ModelError => {
  let message = error.message
  if (Option.isSome(credential)) {
    const secret = Redacted.value(credential.value)
    if (secret.length >= 4) message = message.split(secret).join("[redacted]")
  }
  message = truncate(message, MAX_MESSAGE)
  if (message === error.message) return error
  const fields = {
    provider: error.provider,
    message,
    ...(error.provider_request_id === undefined ? {} : { provider_request_id: error.provider_request_id }),
    ...(error.retry_after_seconds === undefined ? {} : { retry_after_seconds: error.retry_after_seconds })
  }
  switch (error._tag) {
    case "ModelRateLimited":
      return new ModelRateLimited(fields)
    case "ModelUnavailable":
      return new ModelUnavailable(fields)
    case "ModelInvalidResponse":
      return new ModelInvalidResponse(fields)
    case "ModelAuthFailed":
      return new ModelAuthFailed(fields)
    case "ModelFailed":
      return new ModelFailed(fields)
  }
}
