/**
 * The fair share of a node's resource between cells (issue 36, src/Kernel/FairShare.ts): pure
 * logic, driven synchronously (and through its Effect form for interruption).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"

import * as FairShare from "../src/Kernel/FairShare.js"

/** Asks `n` units for `key`; each grant is noted in `order` and kept in `held` until released. */
const asker = (share: FairShare.FairShare, order: Array<string>, held: Array<FairShare.Grant>) => (key: string, n = 1) => {
  const withdraws: Array<() => void> = []
  for (let i = 0; i < n; i++) {
    withdraws.push(share.request(key, (grant) => {
      order.push(key)
      held.push(grant)
    }))
  }
  return withdraws
}

/** Releases the oldest held unit `n` times (each release grants the next waiter, if any). */
const turn = (held: Array<FairShare.Grant>, n: number) => {
  for (let i = 0; i < n; i++) held.shift()!.release()
}

describe("FairShare", () => {
  it("grants at once while there is room, then no more than its capacity", () => {
    const share = FairShare.make({ name: "t", capacity: 3 })
    const order: Array<string> = []
    const held: Array<FairShare.Grant> = []
    const ask = asker(share, order, held)
    ask("a", 5)
    expect(order).toEqual(["a", "a", "a"])
    expect(share.stats()).toMatchObject({ capacity: 3, inUse: 3, waiting: 2 })
    turn(held, 2)
    expect(order).toHaveLength(5)
    expect(share.stats()).toMatchObject({ inUse: 3, waiting: 0 })
    turn(held, 3)
    // nothing held, nothing waiting: the key is forgotten
    expect(share.stats()).toEqual({ capacity: 3, inUse: 0, waiting: 0, keys: [] })
  })

  it("a key that waits behind a busy one is served next, not after the busy one's backlog", () => {
    const share = FairShare.make({ name: "t", capacity: 2 })
    const order: Array<string> = []
    const held: Array<FairShare.Grant> = []
    const ask = asker(share, order, held)
    ask("busy", 50)
    ask("quiet", 1)
    turn(held, 1)
    expect(order.slice(2)).toEqual(["quiet"])
    // two busy keys of the same weight take turns
    ask("other", 10)
    order.length = 0
    turn(held, 12)
    // (the newcomer first: it has had no service yet)
    expect(order.slice(0, 12)).toEqual([
      "other",
      "busy",
      "other",
      "busy",
      "other",
      "busy",
      "other",
      "busy",
      "other",
      "busy",
      "other",
      "busy"
    ])
  })

  it("weights: a key of weight 3 gets three turns for one of a key of weight 1", () => {
    const weights: Record<string, number> = { heavy: 3, light: 1 }
    const share = FairShare.make({ name: "t", capacity: 1, weightOf: (k) => weights[k] ?? 1 })
    const order: Array<string> = []
    const held: Array<FairShare.Grant> = []
    const ask = asker(share, order, held)
    ask("heavy", 100)
    ask("light", 100)
    order.length = 0
    turn(held, 80)
    const heavy = order.filter((k) => k === "heavy").length
    expect(heavy).toBeGreaterThanOrEqual(59)
    expect(heavy).toBeLessThanOrEqual(61)
    // a weight changed by the operator applies from the next grant
    weights["light"] = 3
    order.length = 0
    turn(held, 40)
    expect(order.filter((k) => k === "light").length).toBeGreaterThanOrEqual(19)
  })

  it("an idle key banks no credit: after a long time alone, a busy key still gets its turns", () => {
    const share = FairShare.make({ name: "t", capacity: 1 })
    const order: Array<string> = []
    const held: Array<FairShare.Grant> = []
    const ask = asker(share, order, held)
    ask("early", 1)
    turn(held, 1)
    ask("alone", 101)
    turn(held, 100) // "alone" was served 100 times while "early" asked nothing
    ask("alone", 10)
    ask("early", 10)
    order.length = 0
    turn(held, 10)
    expect(order.filter((k) => k === "early").length).toBeLessThanOrEqual(6)
    expect(order.filter((k) => k === "alone").length).toBeGreaterThanOrEqual(4)
  })

  it("a withdrawn request is never granted; withdrawing a granted one gives the unit back", () => {
    const waits: Array<[string, number]> = []
    let t = 0
    const share = FairShare.make({ name: "t", capacity: 1, now: () => t, onGrant: (k, w) => waits.push([k, w]) })
    const order: Array<string> = []
    const held: Array<FairShare.Grant> = []
    const ask = asker(share, order, held)
    const [first] = ask("a", 1)
    const [withdrawn] = ask("b", 1)
    ask("c", 1)
    withdrawn!()
    withdrawn!()
    expect(share.stats()).toMatchObject({ inUse: 1, waiting: 1 })
    t = 40
    first!() // the grant given back by its withdraw function
    expect(order).toEqual(["a", "c"])
    expect(waits).toEqual([["a", 0], ["c", 40]])
    expect(share.stats()).toMatchObject({ inUse: 1, waiting: 0 })
    held[0]!.release() // a's, released already through `first`: nothing
    expect(share.stats()).toMatchObject({ inUse: 1 })
    held[1]!.release() // c's
    held[1]!.release() // a second release does nothing
    expect(share.stats()).toEqual({ capacity: 1, inUse: 0, waiting: 0, keys: [] })
  })

  it.effect("withPermit: an interrupted waiter takes nothing, a finished one gives its unit back", () =>
    Effect.gen(function*() {
      const share = FairShare.make({ name: "t", capacity: 1 })
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(share.withPermit("a")(Deferred.await(gate)))
      yield* Effect.yieldNow()
      const waiter = yield* Effect.fork(share.withPermit("b")(Effect.succeed("b ran")))
      yield* Effect.yieldNow()
      expect(share.stats()).toMatchObject({ inUse: 1, waiting: 1 })
      yield* Fiber.interrupt(waiter)
      expect(share.stats()).toMatchObject({ inUse: 1, waiting: 0 })
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(holder)
      expect(share.stats().inUse).toBe(0)
      expect(yield* share.withPermit("c")(Effect.succeed("c ran"))).toBe("c ran")
      // a failing effect gives its unit back too
      yield* Effect.flip(share.withPermit("d")(Effect.fail("boom")))
      expect(share.stats()).toEqual({ capacity: 1, inUse: 0, waiting: 0, keys: [] })
    }))
})
