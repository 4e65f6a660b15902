/**
 * Spans that cost nothing when tracing is off (issue 37). Effect's own `withSpan` makes a span
 * whether or not anything records it: a stack-trace `Error` at each call (unless
 * `captureStackTrace: false`), a no-op span, a context copy and an exit hook per use; and
 * `annotateCurrentSpan` outside any span fails internally with a `NoSuchElementException`, an
 * `Error` whose stack is captured and thrown away (8% of the service's CPU on `GET /healthz`).
 * `TracingLive` turns the tracer off unless an exporter is configured; these read that switch
 * (one FiberRef read) and do nothing more when it is off. With tracing on they are Effect's own.
 */
import { Effect, FiberRef, Option, Tracer } from "effect"

/** `Effect.withSpan`, made only when tracing is on (its stack trace not captured: a span's name says where it is). */
export const traced =
  (name: string, options?: Omit<Tracer.SpanOptions, "captureStackTrace">) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(
      FiberRef.get(FiberRef.currentTracerEnabled),
      (enabled) => enabled ? Effect.withSpan(self, name, { ...options, captureStackTrace: false }) : self
    )

/** Sets attributes on the current span, if there is one (no failure made and dropped when there is none). */
export const annotateSpan = (attributes: Record<string, unknown>): Effect.Effect<void> =>
  Effect.map(Effect.serviceOption(Tracer.ParentSpan), (parent) => {
    const span = Option.getOrUndefined(parent)
    if (span === undefined || span._tag !== "Span") return
    for (const key in attributes) span.attribute(key, attributes[key])
  })
