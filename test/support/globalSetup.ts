/**
 * One real Postgres for the whole run: `TEST_DATABASE_URL` if set, else an embedded cluster in a
 * temp dir (world-traversable so the `postgres` user can reach it when the suite runs as root).
 * Each test app creates its own database on it (see App.ts).
 */
import { Cause, Effect, Exit, Redacted, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { TestProject } from "vitest/node"
import * as Embedded from "../../src/Database/Embedded.js"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
  }
}

let scope: Scope.CloseableScope | undefined
let dir: string | undefined

export async function setup(project: TestProject) {
  const external = process.env.TEST_DATABASE_URL
  if (external) {
    project.provide("databaseUrl", external)
    return
  }
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-test-"))
  fs.chmodSync(dir, 0o755)
  scope = Effect.runSync(Scope.make())
  const pg = await Effect.runPromise(
    Scope.extend(Embedded.start({ dataDir: path.join(dir, "pg"), database: "postgres" }), scope).pipe(
      // the cause in plain words before vitest's own report (which may show only that setup failed)
      Effect.tapErrorCause((cause) =>
        Effect.sync(() => console.error(`\nThe tests' embedded Postgres did not start: ${Cause.pretty(cause)}\n`))
      )
    )
  )
  project.provide("databaseUrl", Redacted.value(pg.url))
}

export async function teardown() {
  if (scope) await Effect.runPromise(Scope.close(scope, Exit.void))
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
}
