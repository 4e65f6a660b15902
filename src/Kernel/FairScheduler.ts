/**
 * The node's event loop shared fairly between cells (issue 36): an Effect `Scheduler` for the
 * fibers doing a cell's work (a request for a cell's path, a run actor, a webhook attempt). Effect
 * runs a fiber's next stretch of work (after its I/O answered, a timer fired or it yielded) as a
 * task handed to the fiber's scheduler; Effect's default runs tasks in the order they come, at
 * once. Here each task goes to its cell's lane (the fiber's `CurrentShare`), and the lanes are
 * drained after the event loop has polled I/O (`setImmediate`), in weighted fair order by the CPU
 * time each lane's tasks took: the lane with the least time per weight so far runs next (a lane
 * that was idle starts at the current virtual time: no credit for idleness). A drain runs tasks
 * for at most `sliceMillis`, then lets the loop poll I/O again.
 *
 * So when the node's CPU is saturated, the backlog is in the lanes, not in the loop's FIFO: a cell
 * with a few tasks has them run ahead of a flooding cell's hundreds, and two busy cells of equal
 * weight get equal CPU time. What runs outside fibers (the I/O callbacks themselves: socket reads,
 * the Postgres client's parsing of rows) stays first come, first served.
 *
 * A task of a lane that is owed service (not ahead of the virtual clock: a cell that was quiet)
 * runs right after the callback that scheduled it (a microtask), as with Effect's default
 * scheduler: a quiet cell beside a busy one does not wait for the check phase. Every other task
 * waits for it, so the busy cells' work does not run among the I/O callbacks.
 */
import { Context, FiberRef, type Scheduler } from "effect"
import type { RuntimeFiber } from "effect/Fiber"

import { CurrentShare, NODE_KEY } from "./FairShare.js"

interface Lane {
  readonly key: string
  tasks: Array<Scheduler.Task>
  head: number
  /** virtual time (ms of CPU / weight) this lane has been served up to */
  finish: number
}

export interface FairScheduler extends Scheduler.Scheduler {
  /**
   * `fiber` holds a unit others wait for (a database connection) until `release`: its tasks run
   * ahead of every lane (charged to its own), so what it holds comes back soon, whatever its cell's
   * backlog (priority inheritance)
   */
  readonly hold: (fiber: RuntimeFiber<unknown, unknown>) => void
  readonly release: (fiber: RuntimeFiber<unknown, unknown>) => void
}

export interface FairSchedulerOptions {
  /** a cell's weight (> 0), read at each task */
  readonly weightOf: (key: string) => number
  /** the longest a drain runs tasks before the loop polls I/O again (ms) */
  readonly sliceMillis: number
  /**
   * whether a unit held by `hold`'s fibers is awaited now (a connection of the database pool): only
   * then do the holders' tasks run ahead (default: always)
   */
  readonly contended?: () => boolean
  /** the clock tasks are charged by, in ms (default `performance.now`; tests pass a virtual one) */
  readonly now?: () => number
}

export const make = (options: FairSchedulerOptions): FairScheduler => {
  const lanes = new Map<string, Lane>()
  const contended = options.contended ?? (() => true)
  const now = options.now ?? (() => performance.now())
  /** lanes with tasks, in the order they got their first waiting task */
  const ready = new Set<Lane>()
  let clock = 0
  let armed = false
  /** fibers holding what others wait for, and how many units each */
  const holding = new Map<RuntimeFiber<unknown, unknown>, number>()
  /** their tasks, first come first served, each with its lane */
  const urgent: Array<{ readonly lane: Lane; readonly task: Scheduler.Task }> = []

  const arm = () => {
    if (armed) return
    armed = true
    setImmediate(drain)
  }
  let soonArmed = false
  let draining = false
  const armSoon = () => {
    if (soonArmed || draining) return
    soonArmed = true
    queueMicrotask(soon)
  }

  const pick = (): Lane => {
    let best: Lane | undefined
    let bestStart = Infinity
    for (const lane of ready) {
      const start = Math.max(lane.finish, clock)
      if (start < bestStart) {
        best = lane
        bestStart = start
      }
    }
    return best!
  }

  /** Runs `task` of `lane`, charging its CPU time to the lane (a task that throws, as with Effect's default scheduler, throws on). */
  const runTask = (lane: Lane, task: Scheduler.Task) => {
    const start = Math.max(lane.finish, clock)
    clock = start
    const t0 = now()
    try {
      task()
    } finally {
      const weight = options.weightOf(lane.key)
      lane.finish = start + (now() - t0) / (weight > 0 ? weight : 1)
    }
  }

  /**
   * Runs tasks for at most a slice: first those of fibers holding others' units, then one at a
   * time of the lane owed the most. With `onlyOwed` (right after an I/O callback, not waiting for
   * the loop's check phase) it stops at the first lane that is not owed service, one ahead of the
   * virtual clock (a busy cell): its tasks wait for the drain.
   */
  const run = (onlyOwed: boolean) => {
    if (draining) return
    draining = true
    const end = now() + options.sliceMillis
    try {
      for (;;) {
        if (now() >= end) break
        const held = urgent.shift()
        if (held !== undefined) {
          runTask(held.lane, held.task)
          continue
        }
        if (ready.size === 0) break
        const lane = pick()
        if (onlyOwed && lane.finish > clock) break
        const task = lane.tasks[lane.head]!
        lane.tasks[lane.head] = undefined as unknown as Scheduler.Task
        lane.head++
        if (lane.head === lane.tasks.length) {
          lane.tasks = []
          lane.head = 0
          ready.delete(lane)
        }
        runTask(lane, task)
      }
    } finally {
      draining = false
      // at a drain, lanes that are idle and owed nothing are forgotten: the state is the lanes at work
      if (!onlyOwed) { for (const [key, lane] of lanes) if (!ready.has(lane) && lane.finish <= clock) lanes.delete(key) }
      if (ready.size > 0 || urgent.length > 0) arm()
    }
  }

  /** After the loop's I/O callbacks (its check phase): whatever waits, in fair order. */
  function drain() {
    armed = false
    run(false)
  }

  /** Right after the current callback (a microtask): the tasks owed service, so an idle cell's work does not wait for a busy one's. */
  function soon() {
    soonArmed = false
    run(true)
  }

  return {
    shouldYield: (fiber: RuntimeFiber<unknown, unknown>) =>
      fiber.currentOpCount > fiber.getFiberRef(FiberRef.currentMaxOpsBeforeYield)
        ? fiber.getFiberRef(FiberRef.currentSchedulingPriority)
        : false,
    scheduleTask: (task: Scheduler.Task, _priority: number, fiber?: RuntimeFiber<unknown, unknown>) => {
      const key = fiber === undefined ? NODE_KEY : Context.get(fiber.currentContext, CurrentShare)
      let lane = lanes.get(key)
      if (lane === undefined) {
        lane = { key, tasks: [], head: 0, finish: clock }
        lanes.set(key, lane)
      }
      if (fiber !== undefined && holding.has(fiber) && contended()) urgent.push({ lane, task })
      else {
        lane.tasks.push(task)
        ready.add(lane)
      }
      // a run in progress takes it (or arms the drain); otherwise right after the current callback
      armSoon()
    },
    hold: (fiber) => void holding.set(fiber, (holding.get(fiber) ?? 0) + 1),
    release: (fiber) => {
      const n = holding.get(fiber)
      if (n === undefined) return
      if (n <= 1) holding.delete(fiber)
      else holding.set(fiber, n - 1)
    }
  }
}
