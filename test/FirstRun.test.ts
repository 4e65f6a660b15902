/**
 * The first run (README, docs/first-run.md) from a second terminal (issue 15): with the service started on a
 * non-default PORT, the operator CLI and `npm run quickstart` need only the same DATA_DIR (the
 * service leaves its address in DATA_DIR/service.json), and quickstart runs on the sandbox
 * `provision-sandbox` made instead of provisioning another tenant.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

import { freshDatabase, pg } from "./support/Database.js"
import { killAllChildren, startChild } from "./support/Server.js"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** Runs a script of the repository as a user would in a second terminal: only DATA_DIR set. */
const run = (dataDir: string, args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir }
      for (const name of ["PORT", "OPERATOR_URL", "AGENT_PLATFORM_URL", "OPERATOR_TOKEN", "AGENT_PLATFORM_KEY"]) delete env[name]
      execFile(process.execPath, ["--import", "tsx", ...args], { cwd: repoRoot, env, timeout: 60_000 }, (error, stdout, stderr) =>
        resolve({ code: error ? Number((error as any).code ?? 1) : 0, stdout, stderr }))
    })
  )

describe("first run from a second terminal (issue 15)", () => {
  it.live("the operator CLI's help, piped: plain text, every command with a description", () =>
    Effect.gen(function*() {
      const help = yield* run(fs.mkdtempSync(path.join(os.tmpdir(), "cli-help-")), ["src/Operator/Cli.ts", "--help"])
      expect(help.code, help.stderr).toBe(0)
      expect(help.stdout).not.toContain("\x1b[")
      for (const command of ["provision-sandbox", "apply-pilot", "approve-pilot", "create-key", "quickstart"]) {
        const line = help.stdout.split("\n").find((l) => l.includes(`- ${command} `))
        expect(line, command).toMatch(/\S\s{2,}[A-Z][a-z]+\W/) // usage, then its description
      }
    }), 60_000)

  it.live(
    "the CLI and quickstart find the service through DATA_DIR; quickstart uses the provisioned sandbox",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const db = yield* freshDatabase
        yield* Effect.addFinalizer(() => Effect.promise(killAllChildren))
        const server = yield* Effect.promise(() => startChild(db.url))
        expect(JSON.parse(fs.readFileSync(path.join(server.dataDir, "service.json"), "utf8")).url).toBe(server.baseUrl)

        const provisioned = yield* run(server.dataDir, [
          "src/Operator/Cli.ts",
          "provision-sandbox",
          "--organization",
          "First Run",
          "--email",
          "ops@first.test",
          "--json"
        ])
        expect(provisioned.code, provisioned.stderr).toBe(0)
        const sandbox = JSON.parse(provisioned.stdout)
        // without --json: what a person reads, `key: value` lines
        const readable = yield* run(server.dataDir, ["src/Operator/Cli.ts", "quickstart", "--tenant", sandbox.tenant_id])
        expect(readable.code, readable.stderr).toBe(0)
        expect(readable.stdout).toMatch(/^workspace_id: ws_\w+$/m)
        expect(readable.stdout).not.toContain("{")
        // a list of plain values on one line
        const key = yield* run(server.dataDir, ["src/Operator/Cli.ts", "create-key", "--tenant", sandbox.tenant_id, "--name", "second"])
        expect(key.code, key.stderr).toBe(0)
        expect(key.stdout).toMatch(/^scopes: tenants:read, environments:read, .*usage:read$/m)
        expect(sandbox.tenant_id).toMatch(/^ten_/)
        const stored = fs.statSync(path.join(server.dataDir, "sandbox.json"))
        expect(stored.mode & 0o777).toBe(0o600)

        const quickstart = yield* run(server.dataDir, ["scripts/quickstart.ts"])
        expect(quickstart.code, `${quickstart.stdout}\n${quickstart.stderr}`).toBe(0)
        expect(quickstart.stdout).toContain(`using the sandbox provision-sandbox made (tenant ${sandbox.tenant_id}`)
        expect(quickstart.stdout).toMatch(/run run_\w+: succeeded/)

        // no second tenant was provisioned
        const client = new pg.Client({ connectionString: db.url })
        yield* Effect.acquireRelease(Effect.promise(() => client.connect()), () => Effect.promise(() => client.end()))
        const tenants = yield* Effect.promise(() => client.query("SELECT count(*)::int AS n FROM tenants"))
        expect(tenants.rows[0]!.n).toBe(1)
      })),
    120_000
  )
})
