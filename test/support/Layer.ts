/**
 * A service for a unit test from just the methods the test uses: any other method dies loudly
 * when called, so a test states its dependencies (as Effect-TS/examples' `makeTestLayer`).
 */
import type { Context } from "effect"
import { Effect, Layer } from "effect"

const unimplemented = (service: string, method: PropertyKey) => {
  const dead = Effect.die(`${service}: unimplemented method "${String(method)}" (the test did not provide it)`)
  const fn = () => dead
  Object.assign(fn, dead)
  Object.setPrototypeOf(fn, Object.getPrototypeOf(dead))
  return fn
}

export const makeTestService = <S extends object>(name: string, impl: Partial<S>): S =>
  new Proxy({ ...impl } as S, {
    get(target, prop) {
      if (prop in target) return target[prop as keyof S]
      return ((target as any)[prop] = unimplemented(name, prop))
    },
    has: () => true
  })

export const makeTestLayer = <I, S extends object>(tag: Context.Tag<I, S>) => (impl: Partial<S>): Layer.Layer<I> =>
  Layer.succeed(tag, makeTestService(tag.key, impl))
