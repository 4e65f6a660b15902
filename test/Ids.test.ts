import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { newRequestId } from "../src/Edge/RequestIds.js"
import { makeId } from "../src/Kernel/Ids.js"
import { randomView } from "../src/Kernel/Random.js"

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

  it.effect("each millisecond's ids draw fresh randomness, across refills of the random pool", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2026, 10, 24))
      const randomParts = new Set<string>()
      for (let i = 0; i < 1000; i++) {
        yield* TestClock.adjust("1 millis")
        randomParts.add((yield* makeId("run")).slice(-16))
      }
      expect(randomParts.size).toBe(1000) // 10,000 bytes drawn: the 4 KiB pool refilled twice
    }))

  it("random views: n bytes each, never the same bytes twice; request ids are distinct", () => {
    const seen = new Set<string>()
    for (let i = 0; i < 5000; i++) {
      const view = randomView(7)
      expect(view.length).toBe(7)
      seen.add(view.toString("hex"))
    }
    expect(seen.size).toBe(5000)
    const requests = new Set(Array.from({ length: 2000 }, newRequestId))
    expect(requests.size).toBe(2000)
    expect([...requests].every((id) => /^req_[A-Za-z0-9_-]{16}$/.test(id))).toBe(true)
  })
})
