import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { makeId } from "../src/Kernel/Ids.js"

describe("ids (D2)", () => {
  it.effect("are prefixed, opaque and sort in creation order, also within one millisecond", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2026, 10, 23))
      const ids: Array<string> = []
      for (let i = 0; i < 500; i++) ids.push(yield* makeId("user"))
      yield* TestClock.adjust("1 millis")
      for (let i = 0; i < 50; i++) ids.push(yield* makeId("user"))
      expect(ids.every((id) => /^user_[0-9a-z]{26}$/.test(id))).toBe(true)
      expect(new Set(ids).size).toBe(ids.length)
      expect([...ids].sort()).toEqual(ids)
    }))
})
