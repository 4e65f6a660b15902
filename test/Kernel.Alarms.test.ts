/**
 * The node's alarms on TestClock (src/Kernel/Alarms.ts): an alarm fires when the clock reaches it
 * and not before; a cancelled one never fires; one set earlier than the alarm the loop sleeps for
 * wakes it (it fires on time, not at the later one); alarms fire in time order, each once; a
 * callback that throws costs only its own alarm.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer, TestClock } from "effect"

import { Alarms } from "../src/Kernel/Alarms.js"

describe("alarms (TestClock)", () => {
  it.scoped("fire at their time in order, once each; a cancelled one never; an earlier one wakes the loop", () =>
    Effect.gen(function*() {
      const alarms = Context.get(yield* Layer.build(Alarms.Default), Alarms)
      const fired: Array<string> = []
      const mark = (name: string) => () => void fired.push(name)

      alarms.after(10_000, mark("10s"))
      const cancel = alarms.after(5_000, mark("5s cancelled"))
      yield* TestClock.adjust(Duration.millis(1))
      // earlier than the alarm the loop now sleeps for (5 s): it must wake for it
      alarms.after(2_000, mark("2s")) // at 2,001 ms
      alarms.after(20_000, mark("20s"))
      yield* TestClock.adjust(Duration.millis(1_999))
      expect(fired).toEqual([])
      yield* TestClock.adjust(Duration.millis(1))
      expect(fired).toEqual(["2s"])

      cancel()
      yield* TestClock.adjust(Duration.seconds(5))
      expect(fired).toEqual(["2s"])
      yield* TestClock.adjust(Duration.seconds(3))
      expect(fired).toEqual(["2s", "10s"])
      yield* TestClock.adjust(Duration.seconds(60))
      expect(fired).toEqual(["2s", "10s", "20s"])
      expect(alarms.pending()).toBe(0)

      // a callback that throws costs its own alarm only
      alarms.after(1_000, () => {
        throw new Error("boom")
      })
      alarms.after(2_000, mark("after the throw"))
      yield* TestClock.adjust(Duration.seconds(3))
      expect(fired).toEqual(["2s", "10s", "20s", "after the throw"])
    }))
})
