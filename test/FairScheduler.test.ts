/**
 * The event loop shared fairly between cells (issue 36, src/Kernel/FairScheduler.ts): real fibers
 * in lanes of the scheduler, counting whose steps ran when (no timing thresholds). Tasks are
 * charged by a virtual clock that a step advances by the CPU it stands for, so what the OS does to
 * the test process (another process preempting it mid-task) cannot move the counts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"

import * as FairScheduler from "../src/Kernel/FairScheduler.js"
import { CurrentShare } from "../src/Kernel/FairShare.js"

/** The virtual clock the schedulers below charge tasks by. */
let virtualMillis = 0
const now = () => virtualMillis
/** A step's CPU: `ms` on the virtual clock. */
const burn = (ms: number) => {
  virtualMillis += ms
}

/** `steps` steps of work in cell `key`, each burning `ms` then yielding; `onStep` after each. */
const worker = (scheduler: FairScheduler.FairScheduler, key: string, steps: number, ms: number, onStep: () => void) =>
  Effect.gen(function*() {
    for (let i = 0; i < steps; i++) {
      yield* Effect.sync(() => burn(ms))
      onStep()
      yield* Effect.yieldNow()
    }
  }).pipe(Effect.provideService(CurrentShare, key), Effect.withScheduler(scheduler))

/**
 * The busy cell: 40 fibers of 25 steps of 0.2 ms (1,000 steps), forked; `under` completes after its
 * first 100 steps (the steps are charged virtually, so real time says nothing of its progress).
 */
const busyCell = (scheduler: FairScheduler.FairScheduler, onStep: () => void) =>
  Effect.gen(function*() {
    const under = yield* Deferred.make<void>()
    let steps = 0
    const step = () => {
      onStep()
      if (++steps === 100) Deferred.unsafeDone(under, Exit.void)
    }
    const fiber = yield* Effect.forkDaemon(
      Effect.all(Array.from({ length: 40 }, () => worker(scheduler, "ten_a/sandbox", 25, 0.2, step)), {
        concurrency: "unbounded",
        discard: true
      })
    )
    return { fiber, under: Deferred.await(under) }
  })

describe("the fair scheduler", () => {
  it.live("a quiet cell's work runs ahead of a busy cell's backlog", () =>
    Effect.gen(function*() {
      const scheduler = FairScheduler.make({ weightOf: () => 1, sliceMillis: 2, now })
      let busySteps = 0
      let busyAtQuietEnd = -1
      const busy = yield* busyCell(scheduler, () => busySteps++)
      yield* busy.under
      // the quiet cell: one fiber of 5 steps (busy steps counted from its start)
      let busyAtQuietStart = -1
      const quiet = yield* Effect.forkDaemon(
        Effect.suspend(() => {
          busyAtQuietStart = busySteps
          return worker(scheduler, "ten_b/sandbox", 5, 0.2, () => undefined)
        }).pipe(Effect.ensuring(Effect.sync(() => busyAtQuietEnd = busySteps - busyAtQuietStart)))
      )
      yield* Fiber.join(quiet)
      yield* Fiber.join(busy.fiber)
      expect(busySteps).toBe(1000)
      expect(busyAtQuietStart, "the busy cell had a backlog when the quiet one started").toBeLessThan(800)
      // first come first served (Effect's default scheduler) would run a round of the 40 busy
      // fibers between two of the quiet one's steps: 200 busy steps or more
      expect(busyAtQuietEnd).toBeGreaterThanOrEqual(0)
      expect(busyAtQuietEnd).toBeLessThan(150)
    }))

  it.live("two busy cells get CPU by their weights", () =>
    Effect.gen(function*() {
      const weights: Record<string, number> = { "ten_a/sandbox": 1, "ten_b/sandbox": 3 }
      const scheduler = FairScheduler.make({ weightOf: (k) => weights[k] ?? 1, sliceMillis: 2, now })
      const steps = { "ten_a/sandbox": 0, "ten_b/sandbox": 0 }
      let ratioAtHalf = -1
      const cell = (key: "ten_a/sandbox" | "ten_b/sandbox") =>
        Effect.all(
          Array.from({ length: 10 }, () =>
            worker(scheduler, key, 60, 0.2, () => {
              steps[key]++
              // when the heavier cell is half done: how far each got
              if (key === "ten_b/sandbox" && steps[key] === 300) ratioAtHalf = steps["ten_b/sandbox"] / Math.max(1, steps["ten_a/sandbox"])
            })),
          { concurrency: "unbounded", discard: true }
        )
      yield* Effect.all([cell("ten_a/sandbox"), cell("ten_b/sandbox")], { concurrency: "unbounded", discard: true })
      expect(steps).toEqual({ "ten_a/sandbox": 600, "ten_b/sandbox": 600 })
      // weight 3 against 1: about three steps for one (equal would be about 1)
      expect(ratioAtHalf).toBeGreaterThan(2)
      expect(ratioAtHalf).toBeLessThan(4.5)
    }))

  it.live("a fiber holding what others wait for runs ahead of every lane while it is contended", () =>
    Effect.gen(function*() {
      let contended = true
      const scheduler = FairScheduler.make({ weightOf: () => 1, sliceMillis: 2, contended: () => contended, now })
      let busySteps = 0
      let busyAtHolderEnd = -1
      let busyAtHolderStart = -1
      const busy = yield* busyCell(scheduler, () => busySteps++)
      yield* busy.under
      // a fiber of the busy cell itself, holding a connection: its steps skip the cell's backlog
      const holder = yield* Effect.forkDaemon(
        Effect.gen(function*() {
          const me = yield* Effect.withFiberRuntime<Fiber.RuntimeFiber<unknown, unknown>>((fiber) => Effect.succeed(fiber))
          scheduler.hold(me)
          busyAtHolderStart = busySteps
          yield* worker(scheduler, "ten_a/sandbox", 10, 0.2, () => undefined)
          scheduler.release(me)
          busyAtHolderEnd = busySteps - busyAtHolderStart
        }).pipe(Effect.provideService(CurrentShare, "ten_a/sandbox"), Effect.withScheduler(scheduler))
      )
      yield* Fiber.join(holder)
      contended = false
      yield* Fiber.join(busy.fiber)
      expect(busySteps).toBe(1000)
      expect(busyAtHolderStart, "the busy cell had a backlog when the holder started").toBeLessThan(800)
      // in its cell's lane, it would wait a round of the 40 others per step: 360 steps or more
      expect(busyAtHolderEnd).toBeGreaterThanOrEqual(0)
      expect(busyAtHolderEnd).toBeLessThan(200)
    }))
})
