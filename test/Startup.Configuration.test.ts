/**
 * The service's configuration as a process loads it from its environment: the documented
 * defaults, empty values counting as unset, and the values it cannot run with refused at start.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AppConfig } from "../src/Config/AppConfig.js"
import { generateToken, OperatorToken, tokenFile } from "../src/Operator/Token.js"
import { loadSettings } from "./support/App.js"

describe("configuration", () => {
  it.effect("defaults: an unconfigured process gets the documented values", () =>
    Effect.gen(function*() {
      const loaded = yield* loadSettings({})
      expect(loaded._tag).toBe("Right")
      const s = (loaded as any).right
      expect(s).toMatchObject({
        port: 8080,
        host: "127.0.0.1",
        dataDir: "./.data",
        rateLimit: { ratePerSecond: 60, burst: 120 },
        cellIdleTimeoutSeconds: 600,
        dbPoolSize: 20,
        dbPreparedStatements: 200,
        webhooks: { concurrency: 32, endpointConcurrency: 4, cellConcurrency: 8, leaseSeconds: 60, pollSeconds: 30 }
      })
      expect(Option.isNone(s.databaseUrl)).toBe(true)
      expect(Option.isNone(s.operatorToken)).toBe(true)
      // Empty DATABASE_URL / OPERATOR_TOKEN count as unset.
      const empty = yield* loadSettings({ DATABASE_URL: "", OPERATOR_TOKEN: "" })
      expect(Option.isNone((empty as any).right.databaseUrl)).toBe(true)
      expect(Option.isNone((empty as any).right.operatorToken)).toBe(true)
    }))

  it.effect("refuses values the service cannot run with, at start", () =>
    Effect.gen(function*() {
      for (
        const env of [
          { PORT: "0" },
          { PORT: "70000" },
          { DB_POOL_SIZE: "1" }, // migrations need a second connection besides their lock's
          { DB_PREPARED_STATEMENTS: "-1" },
          { CELL_RATE_LIMIT_RPS: "0" },
          { CELL_RATE_LIMIT_BURST: "0" },
          { CELL_IDLE_TIMEOUT_SECONDS: "0" },
          { WEBHOOK_CONCURRENCY: "0" },
          { WEBHOOK_LEASE_SECONDS: "15" }, // an attempt takes up to 15 s: its lease must outlast it
          { DB_POOL_SIZE: "2" }, // the cluster runner holds one connection for its shard locks
          { RUNNER_PORT: "70000" },
          { CLUSTER_LOCK_REFRESH_SECONDS: "6" }, // the expiration (6 s) must be at least twice the refresh
          { DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS: "-1" },
          { HTTP_DRAIN_SECONDS: "301" }
        ]
      ) {
        const loaded = yield* loadSettings(env)
        expect(loaded._tag, JSON.stringify(env)).toBe("Left")
        expect(String((loaded as any).left), JSON.stringify(env)).toContain(Object.keys(env)[0])
      }
      const ok = yield* loadSettings({
        PORT: "1",
        DB_POOL_SIZE: "3",
        RUNNER_PORT: "34431",
        CELL_RATE_LIMIT_RPS: "0.5",
        CELL_RATE_LIMIT_BURST: "1"
      })
      expect(ok._tag).toBe("Right")
    }))

  it.effect("D20: the runner port needs CLUSTER_SECRET (at least 32 bytes) unless RUNNER_HOST is a loopback address", () =>
    Effect.gen(function*() {
      const secret = randomBytes(32).toString("hex")
      for (
        const env of [
          { RUNNER_HOST: "10.0.0.5" },
          { RUNNER_HOST: "app1" }, // docker-compose's: another container reaches it
          { RUNNER_HOST: "0.0.0.0" },
          { RUNNER_HOST: "fd00::1" }
        ]
      ) {
        const loaded = yield* loadSettings(env)
        expect(loaded._tag, JSON.stringify(env)).toBe("Left")
        expect(String((loaded as any).left)).toContain("CLUSTER_SECRET is required: RUNNER_HOST")
        expect((yield* loadSettings({ ...env, CLUSTER_SECRET: secret }))._tag, JSON.stringify(env)).toBe("Right")
      }
      for (const host of ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"]) {
        expect((yield* loadSettings({ RUNNER_HOST: host }))._tag, host).toBe("Right")
      }
      const short = yield* loadSettings({ RUNNER_HOST: "10.0.0.5", CLUSTER_SECRET: secret.slice(0, 31) })
      expect(String((short as any).left)).toContain("CLUSTER_SECRET must be at least 32 bytes")
      expect((yield* loadSettings({ CLUSTER_SECRET: secret.slice(0, 31) }))._tag).toBe("Left") // loopback too
      const ok = yield* loadSettings({ RUNNER_HOST: "10.0.0.5", CLUSTER_SECRET: secret })
      expect(Option.isSome((ok as any).right.cluster.secret)).toBe(true)
      expect(String((ok as any).right.cluster.secret)).not.toContain(secret) // redacted
    }))

  it.effect("D20: an OPERATOR_TOKEN shorter than 32 characters, and a published OPERATOR_TOKEN / SECRETS_KEY / CLUSTER_SECRET, stop the start", () =>
    Effect.gen(function*() {
      const refusal = (env: Record<string, string>) =>
        Effect.map(loadSettings(env), (loaded) => (loaded._tag === "Left" ? String(loaded.left) : "accepted"))
      expect(yield* refusal({ OPERATOR_TOKEN: randomBytes(16).toString("hex").slice(0, 31) })).toContain(
        "OPERATOR_TOKEN must be at least 32 characters (got 31)"
      )
      // docker-compose.yml's former development values: refused by digest, whatever the files say now
      expect(yield* refusal({ OPERATOR_TOKEN: "op_dev_only_change_me_0123456789abcdef" })).toContain(
        "OPERATOR_TOKEN is a published secret: it is docker-compose.yml's former development OPERATOR_TOKEN"
      )
      const composeKey = "00000000000000000000000000000000000000000000000000000000000000de"
      for (const spelling of [composeKey, composeKey.toUpperCase(), Buffer.from(composeKey, "hex").toString("base64")]) {
        expect(yield* refusal({ SECRETS_KEY: spelling }), spelling).toContain("SECRETS_KEY is a published secret")
      }
      // ... and former test literals
      expect(yield* refusal({ OPERATOR_TOKEN: "op_test_operator_token_0123456789" })).toContain("published secret")
      // a value in one of the repository's files (this one) is refused too, with the file named
      const inThisFile = "cluster_secret_written_in_a_test_file_0123456789"
      expect(yield* refusal({ CLUSTER_SECRET: inThisFile })).toContain(
        "CLUSTER_SECRET is a published secret: it appears in the repository's file test/Startup.Configuration.test.ts"
      )
      // fresh values pass, a generated operator token among them
      const fresh = {
        OPERATOR_TOKEN: generateToken(),
        SECRETS_KEY: randomBytes(32).toString("base64"),
        CLUSTER_SECRET: randomBytes(32).toString("hex")
      }
      expect(yield* refusal(fresh)).toBe("accepted")
      expect(yield* refusal({ OPERATOR_TOKEN: randomBytes(16).toString("hex") })).toBe("accepted") // exactly 32
    }))

  it.effect("D20: a DATA_DIR/operator-token that is short or published stops the start; a generated one is kept", () =>
    Effect.gen(function*() {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "agent-platform-token-"))
      const start = Effect.exit(Effect.provide(
        OperatorToken,
        OperatorToken.Default.pipe(
          Layer.provide(Layer.succeed(AppConfig, AppConfig.defaults({ dataDir })))
        )
      ))
      const generated = yield* start
      expect(Exit.isSuccess(generated) && generated.value.source).toBe("generated")
      const token = fs.readFileSync(tokenFile(dataDir), "utf8").trim()
      expect(token.length).toBe(46)
      const again = yield* start
      expect(Exit.isSuccess(again) && again.value.source).toBe("file")
      for (
        const [written, message] of [["op_short", "must be at least 32 characters"], [
          "op_dev_only_change_me_0123456789abcdef",
          "published"
        ]]
      ) {
        fs.writeFileSync(tokenFile(dataDir), `${written}\n`)
        const refused = yield* start
        expect(Exit.isFailure(refused) && Cause.pretty(refused.cause)).toContain(message)
      }
      fs.rmSync(dataDir, { recursive: true, force: true })
    }))
})
