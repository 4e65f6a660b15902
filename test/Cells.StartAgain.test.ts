/**
 * A `StartRun` that finds the run's actor still at work starts it once more when it ends (the cell,
 * src/Runtime/Cell.ts). The race it closes (seen once in the three-node kill -9 test: a run left
 * `running` with its approved write never made): the actor commits `requires_action` with its
 * approval, a decision commits and sends `StartRun` while the actor is still parking the run (its
 * alarm not yet set, its fiber not yet ended), and the command, finding the actor there, did
 * nothing; the actor then set the alarm and ended, so the decided run waited for the approval's
 * expiry. The cell here runs a scripted actor that parks when told, so the command can arrive in
 * that window every time.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"

import { GetCellStats, StartRun } from "../src/Cells/Protocol.js"
import { defaultRunConfig } from "../src/Config/AppConfig.js"
import { defaultQuotaDefaults } from "../src/Config/QuotaDefaults.js"
import * as Cell from "../src/Runtime/Cell.js"

describe("a cell's StartRun while the run's actor is still at work", () => {
  it.scopedLive("starts the actor once more when it ends: it reads the run as it is then", () =>
    Effect.gen(function*() {
      const parking = yield* Deferred.make<void>()
      const decided = yield* Deferred.make<void>()
      const starts: Array<number> = []
      const cell = yield* Cell.make({ tenantId: "ten_1", environment: "sandbox" }, {
        nextGeneration: () => Effect.succeed(1),
        rateLimit: { ratePerSecond: 60, burst: 120 },
        quotaLimits: () => Effect.succeed(defaultQuotaDefaults.sandbox),
        runs: defaultRunConfig,
        // the first start parks the run (an approval's alarm a day away) once the decision came
        // in; a later start finds the run decided and drives it to its end
        runActor: (runId, options) =>
          Effect.gen(function*() {
            starts.push(starts.length + 1)
            if (starts.length > 1) return
            yield* Deferred.succeed(parking, undefined)
            yield* Deferred.await(decided)
            yield* options.wakeAt(runId, new Date(Date.now() + 86_400_000))
          }),
        completeCancel: () => Effect.void,
        openRuns: () => Effect.succeed([]),
        endForDeletion: () => Effect.void,
        keepAlive: () => Effect.void,
        releaseEveryMillis: 60_000
      })
      yield* cell.handle(new StartRun({ runId: "run_1" }))
      yield* Deferred.await(parking)
      // the decision's StartRun, while the actor is between its commit and its end
      yield* cell.handle(new StartRun({ runId: "run_1" }))
      yield* Deferred.succeed(decided, undefined)
      for (let i = 0; i < 100 && starts.length < 2; i++) yield* Effect.sleep("10 millis")
      expect(starts).toEqual([1, 2])
      // ended, and not parked: the alarm the first start set is superseded by the decision
      for (let i = 0; i < 100 && (yield* cell.handle(new GetCellStats())).running_actors > 0; i++) yield* Effect.sleep("10 millis")
      expect(yield* cell.handle(new GetCellStats())).toMatchObject({ running_actors: 0, parked_runs: 0 })
    }))
})
