/** The operator CLI as a script runs it: plain output (not a terminal), against the test's service. */
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

import { OPERATOR_TOKEN, TestApp } from "./App.js"

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** Every command of the operator CLI (D1, D16, D17 and the support reads). */
export const CLI_COMMANDS = [
  "provision-sandbox",
  "apply-pilot",
  "approve-pilot",
  "pilot-application",
  "create-key",
  "quickstart",
  "review-connection",
  "rotate-signing-key",
  "production-requests",
  "production-request",
  "approve-production",
  "reject-production",
  "quotas",
  "set-quota",
  "settings",
  "set-setting",
  "run",
  "cell",
  "cluster"
]

export const cli = (args: ReadonlyArray<string>) =>
  Effect.flatMap(TestApp, (app) =>
    Effect.promise(() =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        const env: NodeJS.ProcessEnv = {
          ...process.env,
          OPERATOR_URL: app.baseUrl,
          OPERATOR_TOKEN,
          DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "cli-"))
        }
        execFile(
          process.execPath,
          ["--import", "tsx", "src/Operator/Cli.ts", ...args],
          { cwd: repoRoot, env, timeout: 60_000 },
          (error, stdout, stderr) => resolve({ code: error ? Number((error as any).code ?? 1) : 0, stdout, stderr })
        )
      })
    ))
