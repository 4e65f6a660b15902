/**
 * A fair share of a node's resource between cells (issue 36): `capacity` units (database
 * connections, step executions, outbound calls...) granted to keys (a cell, `tenant/environment`)
 * by start-time fair queueing, weighted. While the resource has room a request is granted at once,
 * whoever asks; once it is full, the next unit that frees goes to the waiting key that has had the
 * least service per weight, so a busy key waits behind its own work, not others', and two busy
 * keys of equal weight get equal turns (weight 2 gets twice the turns of weight 1).
 *
 * Each key has a virtual finish time: a grant starts at max(its finish, the clock of the last
 * grant) and ends 1/weight later. A key that was idle starts at the clock (it banks no credit for
 * its idleness); among waiting keys the smallest start wins, ties in the order they started to
 * wait (round robin). A key is forgotten once it holds and awaits nothing: the state is the keys in
 * use. Choosing is linear in the keys waiting, a handful on a node.
 *
 * The core is synchronous (`request` with a callback, for code outside Effect such as the database
 * pool's `connect`); `withPermit` is its Effect form, interruptible while it waits.
 */
import { Context, Effect } from "effect"

/** The share key of work that is no cell's (the node's own loops: the cluster, sweeps, recovery). */
export const NODE_KEY = "node"

/**
 * Whose share the current work spends: a cell's key (`tenant/environment`), set where work for a
 * cell starts (a request for a cell's path, a run actor, a webhook attempt); the node's otherwise.
 * Read by the fair resources the work reaches (the database pool reads it from the fiber that asks
 * for a connection).
 */
export class CurrentShare extends Context.Reference<CurrentShare>()("CurrentShare", {
  defaultValue: (): string => NODE_KEY
}) {}

/** A unit granted: give it back once (later calls do nothing). */
export interface Grant {
  readonly release: () => void
}

/** What a resource's shares look like now. */
export interface ShareStats {
  readonly capacity: number
  readonly inUse: number
  readonly waiting: number
  readonly keys: ReadonlyArray<{ readonly key: string; readonly inUse: number; readonly waiting: number }>
}

/** Told of every grant: the key, and how long it waited (ms; 0 when granted at once). */
export type OnGrant = (key: string, waitedMillis: number) => void

export interface FairShare {
  readonly name: string
  readonly capacity: number
  /**
   * Asks for a unit for `key`; `granted` is called (maybe at once) with it. The returned function
   * withdraws the request, or gives the unit back when it was granted already.
   */
  readonly request: (key: string, granted: (grant: Grant) => void) => () => void
  /** Runs `effect` holding a unit for `key`, waiting (interruptibly) for one if need be. */
  readonly withPermit: (key: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  readonly stats: () => ShareStats
  /** requests waiting now, all keys (cheap: a counter) */
  readonly waiting: () => number
}

interface Waiter {
  readonly granted: (grant: Grant) => void
  readonly since: number
  done: boolean
}

interface Keyed {
  readonly key: string
  finish: number
  inUse: number
  readonly waiters: Array<Waiter>
  /** index of the first waiter not yet granted nor withdrawn */
  head: number
}

export interface FairShareOptions {
  readonly name: string
  /** units granted at once (at least 1) */
  readonly capacity: number
  /**
   * the most units one key holds at once (default: all): the rest stays free for the other keys,
   * so a key that asks when one key holds its most is served at once, without waiting for a unit
   * to come back (the node's own work, `NODE_KEY`, is not capped)
   */
  readonly maxPerKey?: number
  /** a key's weight (> 0; default 1), read at each grant so an operator's change applies at once */
  readonly weightOf?: (key: string) => number
  readonly onGrant?: OnGrant
  /** the time (ms) waits are measured by */
  readonly now?: () => number
}

export const make = (options: FairShareOptions): FairShare => {
  const capacity = Math.max(1, Math.floor(options.capacity))
  const maxPerKey = Math.max(1, Math.min(capacity, Math.floor(options.maxPerKey ?? capacity)))
  /** the node's own work is never capped (its loops may hold a unit while they ask for another) */
  const maxOf = (k: Keyed) => k.key === NODE_KEY ? capacity : maxPerKey
  const weightOf = options.weightOf ?? (() => 1)
  const now = options.now ?? Date.now
  const onGrant = options.onGrant
  const keys = new Map<string, Keyed>()
  /** keys with waiters, in the order they started waiting */
  const backlog = new Set<Keyed>()
  let inUse = 0
  let waiting = 0
  let clock = 0

  const keyed = (key: string): Keyed => {
    let k = keys.get(key)
    if (k === undefined) {
      k = { key, finish: 0, inUse: 0, waiters: [], head: 0 }
      keys.set(key, k)
    }
    return k
  }

  const forgetIfIdle = (k: Keyed) => {
    if (k.inUse === 0 && k.head >= k.waiters.length) keys.delete(k.key)
  }

  const grantTo = (k: Keyed, waiter: Waiter | undefined, waited: number): Grant => {
    const start = Math.max(k.finish, clock)
    clock = start
    const weight = weightOf(k.key)
    k.finish = start + 1 / (weight > 0 ? weight : 1)
    k.inUse++
    inUse++
    let released = false
    const grant: Grant = {
      release: () => {
        if (released) return
        released = true
        k.inUse--
        inUse--
        forgetIfIdle(k)
        dispatch()
      }
    }
    onGrant?.(k.key, waited)
    if (waiter !== undefined) waiter.granted(grant)
    return grant
  }

  /** The next waiter of `k`, skipping withdrawn ones; undefined when it has none. */
  const nextWaiter = (k: Keyed): Waiter | undefined => {
    while (k.head < k.waiters.length) {
      const w = k.waiters[k.head]!
      if (!w.done) return w
      k.head++
    }
    return undefined
  }

  const dropIfDrained = (k: Keyed) => {
    if (k.head >= k.waiters.length) {
      k.waiters.length = 0
      k.head = 0
      backlog.delete(k)
      forgetIfIdle(k)
    }
  }

  const dispatch = () => {
    while (inUse < capacity && backlog.size > 0) {
      let best: Keyed | undefined
      let bestStart = Infinity
      for (const k of backlog) {
        if (k.inUse >= maxOf(k)) continue
        const start = Math.max(k.finish, clock)
        if (start < bestStart) {
          best = k
          bestStart = start
        }
      }
      if (best === undefined) return // every waiting key holds its most
      const k = best
      const w = nextWaiter(k)
      if (w === undefined) {
        dropIfDrained(k)
        continue
      }
      w.done = true
      k.head++
      waiting--
      if (k.head > 1024 && k.head * 2 > k.waiters.length) {
        k.waiters.splice(0, k.head)
        k.head = 0
      }
      // round robin among equals: a key that still waits goes behind the others that wait
      backlog.delete(k)
      if (k.head < k.waiters.length) backlog.add(k)
      else dropIfDrained(k)
      grantTo(k, w, now() - w.since)
    }
  }

  const request = (key: string, granted: (grant: Grant) => void): () => void => {
    const k = keyed(key)
    if (inUse < capacity && backlog.size === 0 && k.inUse < maxOf(k)) {
      const grant = grantTo(k, undefined, 0)
      granted(grant)
      return grant.release
    }
    let grant: Grant | undefined
    const waiter: Waiter = {
      since: now(),
      done: false,
      granted: (g) => {
        grant = g
        granted(g)
      }
    }
    k.waiters.push(waiter)
    waiting++
    backlog.add(k)
    // room may be left that only other keys could take (the waiting ones hold their most)
    if (inUse < capacity) dispatch()
    return () => {
      if (grant !== undefined) return grant.release()
      if (waiter.done) return
      waiter.done = true
      waiting--
      nextWaiter(k) // skips the withdrawn ones at the head
      dropIfDrained(k)
    }
  }

  const acquire = (key: string) =>
    Effect.async<Grant>((resume) => {
      const withdraw = request(key, (grant) => resume(Effect.succeed(grant)))
      return Effect.sync(withdraw)
    })

  const withPermit = (key: string) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(acquire(key)), (grant) => Effect.ensuring(restore(effect), Effect.sync(grant.release)))
    )

  const stats = (): ShareStats => ({
    capacity,
    inUse,
    waiting,
    keys: [...keys.values()].map((k) => ({
      key: k.key,
      inUse: k.inUse,
      waiting: k.waiters.length - k.head - k.waiters.slice(k.head).filter((w) => w.done).length
    }))
  })

  return { name: options.name, capacity, request, withPermit, stats, waiting: () => waiting }
}
