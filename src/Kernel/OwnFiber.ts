/**
 * For work that has a fiber of its own which ends with it (a request's, forked by the server; a
 * run actor's, forked by its cell): what it runs with is set on that fiber once, not scoped and
 * restored. `Effect.provide` and `Effect.locally` wrap the work in an acquire/use/release (a dozen
 * effects) and `provide` copies the fiber's context each time, costs a hot path paid per request
 * and per run; on a fiber that does nothing afterwards, nothing needs restoring.
 */
import { Context, Effect, FiberRef, HashMap } from "effect"

/** `Effect.provide(effect, context)` in the calling fiber's own right (see the module comment). */
export const provideOwn =
  <S>(context: Context.Context<S>) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, S>> =>
    // the requirements `context` meets are met from here on in this fiber: what `provide` gives, without its scope
    Effect.zipRight(
      FiberRef.update(FiberRef.currentContext, (current) => Context.merge(current, context)),
      effect as Effect.Effect<A, E, Exclude<R, S>>
    )

/** `Effect.annotateLogs(annotations)` in the calling fiber's own right (undefined values left out). */
export const annotateOwn = (annotations: Record<string, unknown>): Effect.Effect<void> =>
  FiberRef.update(FiberRef.currentLogAnnotations, (current) => {
    let next = current
    for (const key in annotations) if (annotations[key] !== undefined) next = HashMap.set(next, key, annotations[key])
    return next
  })
