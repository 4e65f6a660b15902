/**
 * Fencing (issue 19): a run commit of a cell generation is made only while the run's cell is still
 * at that generation, checked in the database. After another owner restored the cell (a bump of
 * `environments.cell_generation`), a commit of the previous generation writes nothing and its
 * fiber is interrupted; a commit of the current generation, and an unfenced one (a client's
 * cancel), are made.
 *
 * The run actor's commits are planned from the run as its process last wrote it and checked in the
 * same statement (issue 20): a row another writer moved since makes that commit fall back to the
 * run's lock, where the state machine decides on the run as it is.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Exit, Layer } from "effect"

import { Trigger } from "../src/Domain/RunState.js"
import { RunStoreSql } from "../src/Runs/Repo.js"
import { RunStore } from "../src/Runs/RunStore.js"
import { makeTestApp } from "./support/App.js"
import { expectSingle } from "./support/Envelopes.js"
import { scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

/** A scripted run that is running (sleeping in its first step), and its cell's generation as read now. */
const runningRun = Effect.gen(function*() {
  const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "late" }])
  const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
  yield* eventually(s.getRun(run.id), (r) => r.status === "running")
  const sql = yield* SqlClient.SqlClient
  const generation = Effect.map(
    Effect.orDie(sql<{ g: number }>`SELECT cell_generation AS g FROM environments WHERE tenant_id = ${s.tenantId}`),
    ([row]) => row!.g
  )
  return { s, run, sql, generation }
})

layer(makeTestApp(), { excludeTestServices: true, timeout: "60 seconds" })("fencing by cell generation", (it) => {
  it.effect("a commit of an older generation is refused in the database and interrupts its fiber", () =>
    Effect.gen(function*() {
      const { generation, run, s, sql } = yield* runningRun
      const running = yield* generation
      const store = Context.get(yield* Layer.build(RunStoreSql), RunStore)
      const eventsBefore = (yield* s.events(run.id)).items.length

      // another owner restores the cell: the generation the running actor holds is stale from now on
      yield* Effect.orDie(sql`UPDATE environments SET cell_generation = cell_generation + 1 WHERE tenant_id = ${s.tenantId}`)
      const stale = yield* Effect.exit(store.commitAll(run.id, [{ trigger: Trigger.Cancel() }], running))
      expect(Exit.isInterrupted(stale)).toBe(true)
      expect((yield* s.getRun(run.id)).status).toBe("running")
      expect((yield* s.events(run.id)).items.length).toBe(eventsBefore)

      // the current generation's commit is made
      const current = yield* store.commitAll(run.id, [{ trigger: Trigger.Cancel() }], running + 1)
      expect(Either.isRight(current)).toBe(true)
      expect((yield* s.getRun(run.id)).status).toBe("cancel_requested")
      expect((yield* s.events(run.id)).items.map((e: any) => e.type).slice(eventsBefore)).toEqual(["run.cancel_requested"])
    }).pipe(Effect.scoped))

  it.effect("a commit planned from a row another process moved since writes nothing of its plan: it is decided under the lock", () =>
    Effect.gen(function*() {
      const { generation, run, s } = yield* runningRun
      const g = yield* generation
      // two processes' stores: each keeps the rows its own commits wrote
      const a = Context.get(yield* Layer.build(RunStoreSql), RunStore)
      const b = Context.get(yield* Layer.build(RunStoreSql), RunStore)

      expect(Either.isRight(yield* a.commitAll(run.id, [{ trigger: Trigger.Cancel() }], g!))).toBe(true)
      const afterCancel = (yield* s.events(run.id)).items.length
      // the other process completes the cancel: the row `a` keeps is stale from now on
      expect(Either.isRight(yield* b.commitAll(run.id, [{ trigger: Trigger.CompleteCancel() }], g!))).toBe(true)
      expect((yield* s.getRun(run.id)).status).toBe("cancelled")

      // planned from the stale row, the completion would apply again; decided on the run as it is, it is refused
      const again = yield* a.commitAll(run.id, [{ trigger: Trigger.CompleteCancel() }], g!)
      expect(Either.isLeft(again)).toBe(true)
      const events = (yield* s.events(run.id)).items
      expect(events.length).toBe(afterCancel + 1)
      expect(events.filter((e: any) => e.type === "run.cancelled").length).toBe(1)
      expect((yield* s.getRun(run.id)).status).toBe("cancelled")
    }).pipe(Effect.scoped))
})
