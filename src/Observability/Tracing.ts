/**
 * OpenTelemetry traces (issue 15, deliverable 4): spans exported over OTLP/HTTP by
 * `@effect/opentelemetry`'s own exporter (`OtlpTracer`, no OpenTelemetry SDK), configured by the
 * standard `OTEL_*` variables read through Effect `Config`. Off unless an endpoint is set: then
 * `TracingLive` turns Effect's tracer off (spans would be made and dropped: no export, and a
 * measurable cost per request, issue 20).
 *
 *   - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces`
 *     appended): where spans go. Neither set, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: off.
 *   - `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `http/protobuf` (the default) or `http/json`.
 *   - `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `k=v,k2=v2`, values URL-decoded (the traces' win).
 *   - `OTEL_SERVICE_NAME` (default `agent-platform`), `OTEL_RESOURCE_ATTRIBUTES` (`k=v,...`).
 *   - `OTEL_BSP_SCHEDULE_DELAY` (ms, default 5000) and `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512).
 * A value this cannot honour (gRPC, another exporter, a malformed list or URL) stops the start.
 * The spans themselves are made where the work happens (docs/operations.md lists them); a span that
 * fails is exported with its error's message and stack, so library calls whose errors may carry
 * what a trace must not hold run under `withFailureDetailsWithheld`.
 */
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import { FetchHttpClient } from "@effect/platform"
import {
  Cause,
  Config,
  ConfigError,
  ConfigProvider,
  Context,
  Duration,
  Effect,
  Either,
  Exit,
  FiberRef,
  Layer,
  Option,
  Redacted,
  Tracer
} from "effect"

export interface TracingSettings {
  /** the OTLP/HTTP traces URL */
  readonly url: string
  readonly protocol: "http/protobuf" | "http/json"
  /** may hold credentials (an API key header) */
  readonly headers: Redacted.Redacted<Record<string, string>>
  readonly serviceName: string
  readonly attributes: Record<string, string>
  readonly exportInterval: Duration.Duration
  readonly maxBatchSize: number
}

const invalid = (name: string, message: string) => ConfigError.InvalidData([name], `${name} ${message}`)

/** `k=v,k2=v2` (W3C baggage style, values URL-decoded); an empty value is an empty list. */
export const parseList = (name: string, text: string): Either.Either<Record<string, string>, ConfigError.ConfigError> => {
  const entries: Record<string, string> = {}
  for (const item of text.split(",")) {
    if (item.trim() === "") continue
    const cut = item.indexOf("=")
    const key = cut < 0 ? "" : item.slice(0, cut).trim()
    if (key === "") return Either.left(invalid(name, "must be a list of key=value pairs separated by commas"))
    try {
      entries[key] = decodeURIComponent(item.slice(cut + 1).trim())
    } catch {
      return Either.left(invalid(name, `has a value that is not URL-encoded correctly (key ${JSON.stringify(key)})`))
    }
  }
  return Either.right(entries)
}

/** An unset or empty variable (the spec treats empty as unset). */
const optional = (name: string) => Config.option(Config.string(name)).pipe(Config.map(Option.filter((s) => s.trim() !== "")))

const list = (name: string) => optional(name).pipe(Config.mapOrFail((value) => parseList(name, Option.getOrElse(value, () => ""))))

const positiveInteger = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be a positive integer`, validation: (n) => n > 0 })
  )

const PROTOCOLS = ["http/protobuf", "http/json"] as const

/** The traces URL: the signal's endpoint as is, or the base endpoint with `/v1/traces`. */
const endpointOf = (traces: Option.Option<string>, base: Option.Option<string>) =>
  Option.orElse(
    Option.map(traces, (t) => ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", t.trim()] as const),
    () => Option.map(base, (b) => ["OTEL_EXPORTER_OTLP_ENDPOINT", `${b.trim().replace(/\/+$/, "")}/v1/traces`] as const)
  )

const isHttpUrl = (value: string) => {
  try {
    const url = new URL(value)
    return url.protocol === "http:" || url.protocol === "https:"
  } catch {
    return false
  }
}

/** The exporter's settings, or none when tracing is off. */
export const TracingConfig: Config.Config<Option.Option<TracingSettings>> = Config.all({
  disabled: optional("OTEL_SDK_DISABLED"),
  exporter: optional("OTEL_TRACES_EXPORTER"),
  tracesEndpoint: optional("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
  endpoint: optional("OTEL_EXPORTER_OTLP_ENDPOINT"),
  tracesProtocol: optional("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
  protocol: optional("OTEL_EXPORTER_OTLP_PROTOCOL"),
  headers: list("OTEL_EXPORTER_OTLP_HEADERS"),
  tracesHeaders: list("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
  serviceName: optional("OTEL_SERVICE_NAME"),
  attributes: list("OTEL_RESOURCE_ATTRIBUTES"),
  scheduleDelayMs: positiveInteger("OTEL_BSP_SCHEDULE_DELAY", 5000),
  maxBatchSize: positiveInteger("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
}).pipe(Config.mapOrFail((c): Either.Either<Option.Option<TracingSettings>, ConfigError.ConfigError> => {
  const endpoint = endpointOf(c.tracesEndpoint, c.endpoint)
  if (Option.isNone(endpoint) || Option.getOrElse(c.disabled, () => "").trim().toLowerCase() === "true") {
    return Either.right(Option.none())
  }
  const exporters = Option.getOrElse(c.exporter, () => "otlp").split(",").map((e) => e.trim().toLowerCase())
  if (exporters.includes("none")) return Either.right(Option.none())
  if (!exporters.includes("otlp")) return Either.left(invalid("OTEL_TRACES_EXPORTER", "must be otlp or none"))
  const [endpointName, url] = endpoint.value
  if (!isHttpUrl(url)) return Either.left(invalid(endpointName, "must be an http or https URL"))
  const [protocolName, protocol] = Option.isSome(c.tracesProtocol)
    ? ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", c.tracesProtocol.value.trim()]
    : ["OTEL_EXPORTER_OTLP_PROTOCOL", Option.getOrElse(c.protocol, () => "http/protobuf").trim()]
  if (!PROTOCOLS.includes(protocol as any)) {
    return Either.left(invalid(protocolName, `must be http/protobuf or http/json (grpc is not supported); got ${JSON.stringify(protocol)}`))
  }
  return Either.right(Option.some({
    url,
    protocol: protocol as TracingSettings["protocol"],
    headers: Redacted.make({ ...c.headers, ...c.tracesHeaders }),
    // OTEL_SERVICE_NAME wins over `service.name` in OTEL_RESOURCE_ATTRIBUTES.
    serviceName: Option.getOrElse(c.serviceName, () => c.attributes["service.name"] ?? "agent-platform").trim(),
    attributes: c.attributes,
    exportInterval: Duration.millis(c.scheduleDelayMs),
    maxBatchSize: c.maxBatchSize
  }))
}))

/** The OTLP exporter as Effect's tracer, for the scope of the layer (spans left are sent when it closes). */
export const layerWith = (settings: TracingSettings): Layer.Layer<never> => {
  const { "service.name": _name, "service.version": version, ...attributes } = settings.attributes
  return Layer.unwrapScoped(
    OtlpTracer.make({
      url: settings.url,
      headers: Redacted.value(settings.headers),
      resource: { serviceName: settings.serviceName, ...(version === undefined ? {} : { serviceVersion: version }), attributes },
      exportInterval: settings.exportInterval,
      maxBatchSize: settings.maxBatchSize
    }).pipe(
      // All of it comes from `settings`: the exporter reads no variable itself (it would add
      // OTEL_RESOURCE_ATTRIBUTES again, undecoded, and a second `service.name`).
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map())),
      Effect.provide(settings.protocol === "http/json" ? OtlpSerialization.layerJson : OtlpSerialization.layerProtobuf),
      // The collector is the operator's: plain fetch, not the destination guard of customer URLs.
      Effect.provide(FetchHttpClient.layer),
      Effect.map((tracer) => Layer.setTracer(lowCardinalityNames(tracer)))
    )
  )
}

/**
 * @effect/cluster names an entity's spans `Type(entityId).Tag` (`Cell(ten_.../sandbox).StartRun`):
 * a name per tenant. Exported as `Type.Tag`; the id is already the span's `entity.id` attribute.
 */
const ENTITY_SPAN = /^(\w+)\([^)]*\)\.(\w+)$/
const lowCardinalityNames = (tracer: Tracer.Tracer): Tracer.Tracer =>
  Tracer.make({
    span: (name, ...rest) => tracer.span(name.replace(ENTITY_SPAN, "$1.$2"), ...rest),
    context: (f, fiber) => tracer.context(f, fiber)
  })

/** Tracing as the environment says: the OTLP exporter, or nothing at all. */
export const TracingLive: Layer.Layer<never, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.map(TracingConfig, Option.match({ onNone: () => Layer.setTracerEnabled(false), onSome: layerWith }))
)

/**
 * `effect` without the span it was started under: for fibers that outlive the request that
 * happened to start them (a cell and its timers), whose spans would otherwise join its trace.
 */
export const withoutParentSpan = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.mapInputContext(effect, (context: Context.Context<R>) => Context.omit(Tracer.ParentSpan)(context) as Context.Context<R>)

/** What a failed span made under `withFailureDetailsWithheld` says: its error's type (and HTTP status). */
const withheld = (cause: Cause.Cause<unknown>): Cause.Cause<unknown> => {
  if (Cause.isInterruptedOnly(cause)) return cause
  const error: any = Cause.squash(cause)
  const type = String(error?._tag ?? error?.name ?? typeof error)
  const status = error?.response?.status
  const summary = new Error(`${typeof status === "number" ? `HTTP ${status}; ` : ""}details withheld from traces`)
  summary.name = type
  summary.stack = `${type}: ${summary.message}`
  return Cause.fail(summary)
}

/**
 * `effect` with the spans it makes (a library's, e.g. @effect/ai's and the HTTP client's) ending
 * without their failures' details: only the error's type and HTTP status are exported. @effect/ai's
 * errors carry the provider's response body, which may echo the credential or the prompt.
 */
export const withFailureDetailsWithheld = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(FiberRef.get(FiberRef.currentTracerEnabled), (enabled) =>
    // No tracing, no spans to withhold from: the wrapper's `context` runs on every step of the fibers
    // beneath it (5% of the service's CPU on the scripted run path, issue 20).
    enabled ? withheldSpans(effect) : effect)

const withheldSpans = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.tracer, (tracer) =>
    Effect.withTracer(
      effect,
      Tracer.make({
        span: (...args) => {
          const span = tracer.span(...args)
          // The span itself, but for how it ends (children, attributes and events reach it as they are).
          return Object.assign(Object.create(span) as Tracer.Span, {
            end: (endTime: bigint, exit: Exit.Exit<unknown, unknown>) =>
              span.end(endTime, Exit.isFailure(exit) ? Exit.failCause(withheld(exit.cause)) : exit)
          })
        },
        context: (f, fiber) => tracer.context(f, fiber)
      })
    ))
