/**
 * The node's fair shares (issue 36): each resource the cells of a node contend for, granted per
 * cell by its own FairShare, all weighted by one table of cell weights (1 unless an operator set
 * one, through config or the operator API). Built once per process (src/Config/Shares.ts from
 * the operator's configuration); the work for a cell names its key with `CurrentShare`.
 */
import { Context, Effect, FiberRef } from "effect"

import * as FairScheduler from "./FairScheduler.js"
import * as FairShare from "./FairShare.js"

/** The resources shared fairly, by the name metrics and the operator's view use. */
export const RESOURCES = ["db", "steps", "outbound", "bytes"] as const
export type Resource = typeof RESOURCES[number]

/** Cell weights: 1 unless set (> 0). */
export interface Weights {
  readonly get: (key: string) => number
  /** Sets a key's weight; undefined (or 1) goes back to the default. */
  readonly set: (key: string, weight: number | undefined) => void
  readonly all: () => ReadonlyMap<string, number>
}

export const makeWeights = (initial: ReadonlyMap<string, number> = new Map()): Weights => {
  const table = new Map([...initial].filter(([, w]) => w > 0 && w !== 1))
  return {
    get: (key) => table.get(key) ?? 1,
    set: (key, weight) => {
      if (weight === undefined || weight === 1 || !(weight > 0)) table.delete(key)
      else table.set(key, weight)
    },
    all: () => table
  }
}

/** What a cell got of a resource on this node since the process started. */
export interface Served {
  readonly grants: number
  /** the sum of its grants' waits */
  readonly waitedMillis: number
}

export interface SharesShape {
  readonly weights: Weights
  readonly of: (resource: Resource) => FairShare.FairShare
  /** what `key` got of `resource` on this node so far (the operator's cell view) */
  readonly served: (resource: Resource, key: string) => Served
  /** the event loop's CPU, granted to the fibers of a cell's work by their lane */
  readonly scheduler: FairScheduler.FairScheduler
}

export class Shares extends Context.Tag("Shares")<Shares, SharesShape>() {}

/** The node's shares: one FairShare per resource with its capacity, weighted by `weights`. */
export const make = (options: {
  readonly capacities: { readonly [R in Resource]: number }
  readonly weights: Weights
  /** the longest the fair scheduler runs cells' tasks before the event loop polls I/O (ms) */
  readonly sliceMillis?: number
  /** told of every grant (metrics) */
  readonly onGrant?: (resource: Resource, key: string, waitedMillis: number) => void
}): SharesShape => {
  // per resource, per cell: grants and the sum of their waits (one entry per cell the node served)
  const served = new Map<Resource, Map<string, { grants: number; waitedMillis: number }>>(
    RESOURCES.map((resource) => [resource, new Map()])
  )
  const shares = new Map<Resource, FairShare.FairShare>(
    RESOURCES.map((resource) => [
      resource,
      FairShare.make({
        name: resource,
        capacity: options.capacities[resource],
        // one cell holds at most three quarters of a resource (of 8 units or more): the rest is
        // there at once for the others, whatever the busy cell's own units are waiting on
        maxPerKey: options.capacities[resource] >= 8 ? Math.ceil(options.capacities[resource] * 0.75) : options.capacities[resource],
        weightOf: options.weights.get,
        onGrant: (key, waited) => {
          const byKey = served.get(resource)!
          const entry = byKey.get(key)
          if (entry === undefined) byKey.set(key, { grants: 1, waitedMillis: waited })
          else {
            entry.grants++
            entry.waitedMillis += waited
          }
          options.onGrant?.(resource, key, waited)
        }
      })
    ])
  )
  return {
    weights: options.weights,
    scheduler: FairScheduler.make({
      weightOf: options.weights.get,
      sliceMillis: options.sliceMillis ?? 2,
      // a fiber holding a database connection runs ahead while others wait for one
      contended: () => shares.get("db")!.waiting() > 0
    }),
    of: (resource) => shares.get(resource)!,
    served: (resource, key) => served.get(resource)!.get(key) ?? { grants: 0, waitedMillis: 0 }
  }
}

/**
 * Runs `effect` holding a unit of `resource` granted to the current work's cell (`CurrentShare`),
 * waiting behind that cell's own work if the resource is full.
 */
export const sharedBy = (shares: SharesShape, resource: Resource) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(FairShare.CurrentShare, (key) => shares.of(resource).withPermit(key)(effect))

/**
 * Runs `effect` as the work of the cell `key`: what it spends of the node's shares is that cell's
 * (`CurrentShare`), and its fibers (those it forks too) run in the cell's lane of the fair
 * scheduler.
 */
export const asCell = (shares: SharesShape, key: string) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  effect.pipe(Effect.provideService(FairShare.CurrentShare, key), Effect.withScheduler(shares.scheduler))

/**
 * Makes the calling fiber, from now on, the work of the cell `key` (as `asCell`), for a fiber that
 * does nothing else until it ends (a request's own, which the server forks for it): set, not
 * scoped and restored (which costs a request a dozen effects and a copy of its context per value).
 */
export const becomeCell = (shares: SharesShape, key: string): Effect.Effect<void> =>
  Effect.zipRight(
    FiberRef.update(FiberRef.currentContext, Context.add(FairShare.CurrentShare, key)),
    FiberRef.set(FiberRef.currentScheduler, shares.scheduler)
  )
