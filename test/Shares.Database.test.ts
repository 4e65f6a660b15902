/**
 * The database pool's connections are granted per cell (issue 36, src/Database/Client.ts
 * `fairPool`): with every connection lent to one cell's backlog of statements, another cell's
 * statement gets the next connection that frees instead of waiting behind that backlog.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { AppConfig } from "../src/Config/AppConfig.js"
import { DatabaseLive } from "../src/Database/Client.js"
import { CurrentShare } from "../src/Kernel/FairShare.js"
import { Shares } from "../src/Kernel/Shares.js"
import { freshDatabase } from "./support/Database.js"

const database = Layer.unwrapScoped(
  Effect.gen(function*() {
    const { url } = yield* freshDatabase
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-shares-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dataDir, { recursive: true, force: true })))
    const settings = AppConfig.defaults({ databaseUrl: Option.some(Redacted.make(url)), dataDir, dbPoolSize: 3 })
    return DatabaseLive.pipe(Layer.provideMerge(Layer.succeed(AppConfig, settings)))
  })
)

describe("the database pool's fair shares", () => {
  it.live("a cell's statement is not queued behind another cell's backlog", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const share = (yield* Shares).of("db")
      const sleep = (key: string) => Effect.provideService(sql`SELECT pg_sleep(0.05)`, CurrentShare, key)
      // 30 statements of 50 ms from one cell on 3 connections: half a second of backlog
      const backlog = yield* Effect.fork(Effect.all(Array.from({ length: 30 }, () => sleep("ten_a/sandbox")), { concurrency: "unbounded" }))
      yield* Effect.sleep("60 millis")
      const started = Date.now()
      yield* Effect.provideService(sql`SELECT 1`, CurrentShare, "ten_b/sandbox")
      const waited = Date.now() - started
      // the next connection to free (at most one 50 ms statement), not the end of the backlog (~450 ms)
      expect(waited).toBeLessThan(200)
      // the backlog still waits, in its cell's queue
      expect(share.stats().waiting).toBeGreaterThan(10)
      yield* Fiber.join(backlog)
      expect(share.stats()).toMatchObject({ inUse: 0, waiting: 0 })
    }).pipe(Effect.provide(database)), 60_000)
})
