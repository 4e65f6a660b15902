/**
 * The handlers of the one HttpApi, as data (issue 37, "one pipeline for every route").
 *
 * `group` is `HttpApiBuilder.group`'s twin, with the same types (a group's layer is still an
 * `ApiGroup`, so `HttpApiBuilder.api(Api)` still fails to compile while an endpoint has no
 * handler), but it records each endpoint's handler in the node's `HandlerRegistry` instead of adding a
 * route to the platform's router: the edge (src/Edge/Endpoints.ts) compiles them once into the
 * request pipeline's own table, with their decoders and encoders, and runs a request's handler in
 * the request's fiber (no router, no middleware stack, no per-request context merge).
 */
import type { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Context, Effect, Layer, Pipeable, type Scope } from "effect"

/** One endpoint's handler, as `HttpApiBuilder`'s handlers hold it. */
export interface Handled {
  readonly endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps
  readonly handler: (request: any) => Effect.Effect<any, any, any>
  /** `handleRaw`: the payload is not decoded (the handler reads the request) */
  readonly withFullRequest: boolean
  readonly uninterruptible: boolean
}

export interface HandlerRegistryShape {
  readonly add: (group: HttpApiGroup.HttpApiGroup.AnyWithProps, handled: ReadonlyArray<Handled>) => void
  /** every group's handlers, by group identifier */
  readonly all: () => ReadonlyMap<string, ReadonlyArray<Handled>>
}

export class HandlerRegistry extends Context.Tag("Kernel/HttpGroup/HandlerRegistry")<HandlerRegistry, HandlerRegistryShape>() {
  static readonly Live = Layer.sync(HandlerRegistry, () => {
    const groups = new Map<string, ReadonlyArray<Handled>>()
    return HandlerRegistry.of({
      add: (group, handled) => void groups.set(group.identifier, handled),
      all: () => groups
    })
  })
}

/** What `build` is given: `.handle(name, handler)` and `.handleRaw(name, handler)`, each a copy with one more. */
const recorder = (group: HttpApiGroup.HttpApiGroup.AnyWithProps, handled: ReadonlyArray<Handled>): any => {
  const add = (withFullRequest: boolean) =>
  (
    name: string,
    handler: Handled["handler"],
    options?: { readonly uninterruptible?: boolean | undefined }
  ) =>
    recorder(group, [...handled, {
      endpoint: group.endpoints[name] as HttpApiEndpoint.HttpApiEndpoint.AnyWithProps,
      handler,
      withFullRequest,
      uninterruptible: options?.uninterruptible ?? false
    }])
  return {
    group,
    handlers: handled,
    handle: add(false),
    handleRaw: add(true),
    pipe(...args: Array<unknown>) {
      return (Pipeable.pipeArguments as any)(this, args)
    }
  }
}

/** `HttpApiBuilder.group` (the same signature), recording the handlers in the `HandlerRegistry`. */
export const group: <
  ApiId extends string,
  Groups extends HttpApiGroup.HttpApiGroup.Any,
  ApiError,
  ApiR,
  const Name extends HttpApiGroup.HttpApiGroup.Name<Groups>,
  Return
>(
  api: HttpApi.HttpApi<ApiId, Groups, ApiError, ApiR>,
  groupName: Name,
  build: (
    handlers: HttpApiBuilder.Handlers.FromGroup<ApiError, ApiR, HttpApiGroup.HttpApiGroup.WithName<Groups, Name>>
  ) => HttpApiBuilder.Handlers.ValidateReturn<Return>
) => Layer.Layer<
  HttpApiGroup.ApiGroup<ApiId, Name>,
  HttpApiBuilder.Handlers.Error<Return>,
  | Exclude<
    HttpApiBuilder.Handlers.Context<Return> | HttpApiGroup.HttpApiGroup.MiddlewareWithName<Groups, Name>,
    Scope.Scope
  >
  | HandlerRegistry
> = ((api: any, groupName: string, build: (handlers: any) => any) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const registry = yield* HandlerRegistry
    const group = api.groups[groupName] as HttpApiGroup.HttpApiGroup.AnyWithProps
    const result = build(recorder(group, []))
    const built = Effect.isEffect(result) ? yield* (result as Effect.Effect<any>) : result
    registry.add(group, built.handlers)
  }))) as any
