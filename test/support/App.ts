/**
 * A real instance of the service for a test: a fresh database on the run's Postgres, migrations,
 * the full HTTP stack on 127.0.0.1:<random port>. Built inside the test's Effect, so the server's
 * fibers see the test's Clock (TestClock in `it.effect`, the real one in `it.live`).
 */
import { HttpServer } from "@effect/platform"
import { type SqlClient } from "@effect/sql"
import { ConfigProvider, Context, Effect, Layer, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AppConfig, type AppConfigShape, defaultToolConfig } from "../../src/Config/AppConfig.js"
import { DatabaseLive } from "../../src/Database/Client.js"
import { ServerLive } from "../../src/Edge/Server.js"
import { HttpLive } from "../../src/Http.js"
import { freshDatabase } from "./Database.js"

/**
 * The operator token of the test's services, new for each test file: a literal would be a
 * published secret, which the service refuses at start (D20, src/Config/PublishedSecrets.ts).
 */
export const OPERATOR_TOKEN = `op_test_${randomBytes(24).toString("base64url")}`

export interface TestAppShape {
  readonly baseUrl: string
  readonly databaseUrl: string
  readonly settings: AppConfigShape
}
export class TestApp extends Context.Tag("TestApp")<TestApp, TestAppShape>() {}

/** The service on a fresh database. `databaseUrl` reuses an existing database (restart tests). */
export const makeTestApp = (overrides: Partial<AppConfigShape> = {}, databaseUrl?: string) =>
  Layer.unwrapScoped(
    Effect.gen(function*() {
      const url = databaseUrl ?? (yield* freshDatabase).url
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-app-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dataDir, { recursive: true, force: true })))
      const settings = AppConfig.defaults({
        databaseUrl: Option.some(Redacted.make(url)),
        dataDir,
        operatorToken: Option.some(Redacted.make(OPERATOR_TOKEN)),
        dbPoolSize: 5,
        // One background reconciliation pass a day: TestClock jumps of days stay a few wake-ups
        // (tests of reconciliation set their own interval).
        tools: { ...defaultToolConfig, reconcileRetrySeconds: 86_400 },
        ...overrides
      })
      const AppInfo = Layer.effect(
        TestApp,
        Effect.map(HttpServer.HttpServer, (server) => {
          const address = server.address as HttpServer.TcpAddress
          return { baseUrl: `http://127.0.0.1:${address.port}`, databaseUrl: url, settings }
        })
      )
      return AppInfo.pipe(
        Layer.provideMerge(HttpLive),
        Layer.provideMerge(ServerLive),
        Layer.provideMerge(DatabaseLive),
        Layer.provideMerge(Layer.succeed(AppConfig, settings))
      )
    })
  )

/** AppConfig as a process would load it from these environment variables (Left: the refusal). */
export const loadSettings = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(AppConfig.config, ConfigProvider.fromMap(new Map(Object.entries(env)))))

export type TestAppServices = TestApp | SqlClient.SqlClient | AppConfig
