/**
 * The operator quickstart (contract part 1, D1) end to end over HTTP: made once at provisioning,
 * the same ids on every read, made once on first use for an environment that has none (under
 * concurrency too), the first key acting as its service actor, 404/401 like every operator route,
 * the QUICKSTART_MODEL configuration and its key, which never leaves the encrypted column.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Logger, LogLevel, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { Agents } from "../src/Agents.js"
import { AppConfig } from "../src/Config/AppConfig.js"
import { QUICKSTART_GREETING } from "../src/Operator/Quickstart.js"
import { Deletions } from "../src/Platform/Deletions.js"
import { loadSettings, makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, type Reply, request } from "./support/Client.js"
import { expectError, expectSingle } from "./support/Envelopes.js"
import { captureOutput } from "./support/Output.js"

interface Ids {
  readonly service_actor_id: string
  readonly workspace_id: string
  readonly agent_revision_id: string
}

const quickstartPath = (tenantId: string, environment = "sandbox") => `/tenants/${tenantId}/environments/${environment}/quickstart`

/** GET quickstart: 200 with exactly the three ids (a bare object, like other operator responses). */
const getQuickstart = (tenantId: string) =>
  Effect.map(operator("GET", quickstartPath(tenantId)), (res): Ids => {
    expect(res.status, res.text).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(["agent_revision_id", "service_actor_id", "workspace_id"])
    return res.body
  })

/** Rows of a table for one tenant. */
const count = (table: string, tenantId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(table)} WHERE tenant_id = ${tenantId}`.pipe(
        Effect.map((rows) => rows[0]!.n),
        Effect.orDie
      )
  )

/** Apply and approve, without making a key. */
const approve = (organization = "Acme") =>
  Effect.gen(function*() {
    const app = yield* operator("POST", "/pilot-applications", { organization_name: organization, contact_email: "ops@acme.test" })
    expect(app.status, app.text).toBe(201)
    const approved = yield* operator("POST", `/pilot-applications/${app.body.id}/approve`)
    expect(approved.status, approved.text).toBe(200)
    return { applicationId: app.body.id as string, tenantId: approved.body.tenant_id as string, replies: [app, approved] }
  })

const READER_SCOPES = ["agents:read", "keys:read", "service-actors:read"]

describe("operator quickstart (D1)", () => {
  it.live("made once at provisioning: stable ids, a readable no-tools scripted revision, the first key as its actor", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const { applicationId, tenantId } = yield* approve()

      // Made by the approval itself, before the environment became ready.
      const [row] = yield* sql<{ created_at: Date; updated_at: Date; state: string }>`
        SELECT q.created_at, e.updated_at, e.state FROM quickstarts q
        JOIN environments e ON e.tenant_id = q.tenant_id AND e.name = q.environment
        WHERE q.tenant_id = ${tenantId} AND q.environment = 'sandbox'`.pipe(Effect.orDie)
      expect(row).toBeDefined()
      expect(row!.state).toBe("ready")
      expect(row!.created_at.getTime()).toBeLessThanOrEqual(row!.updated_at.getTime())

      const ids = yield* getQuickstart(tenantId)
      expect(ids.service_actor_id).toMatch(/^sa_/)
      expect(ids.workspace_id).toMatch(/^ws_/)
      expect(ids.agent_revision_id).toMatch(/^rev_/)
      expect(yield* getQuickstart(tenantId)).toEqual(ids)
      // Approving again answers the same and makes nothing new.
      const again = yield* operator("POST", `/pilot-applications/${applicationId}/approve`)
      expect(again.status, again.text).toBe(200)
      expect(again.body.tenant_id).toBe(tenantId)
      expect(yield* getQuickstart(tenantId)).toEqual(ids)

      // The first key acts as the quickstart's service actor; a console key as none.
      const first = yield* operator("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, { name: "first" })
      expect(first.status, first.text).toBe(201)
      expect(first.body.kind).toBe("quickstart")
      expect(first.body.service_actor_id).toBe(ids.service_actor_id)
      const second = yield* createKey(tenantId, undefined, "another first key")
      const reader = yield* createKey(tenantId, READER_SCOPES, "reader")
      expect((reader as any).service_actor_id).toBeNull()

      const P = `/v1/tenants/${tenantId}/environments/sandbox`
      const shown = expectSingle(yield* request("GET", `${P}/api-keys/${first.body.id}`, { key: reader.secret }))
      expect(shown.service_actor_id).toBe(ids.service_actor_id)
      expect(expectSingle(yield* request("GET", `${P}/api-keys/${second.id}`, { key: reader.secret })).service_actor_id)
        .toBe(ids.service_actor_id)
      expect(expectSingle(yield* request("GET", `${P}/api-keys/${reader.id}`, { key: reader.secret })).service_actor_id)
        .toBeNull()

      // The resources are ordinary ones of the environment, readable with a management key.
      const actor = expectSingle(yield* request("GET", `${P}/service-actors/${ids.service_actor_id}`, { key: reader.secret }))
      expect(actor).toMatchObject({ object: "service_actor", id: ids.service_actor_id })
      const workspace = expectSingle(yield* request("GET", `${P}/workspaces/${ids.workspace_id}`, { key: reader.secret }))
      expect(workspace).toMatchObject({ object: "workspace", id: ids.workspace_id })
      const revision = expectSingle(
        yield* request("GET", `${P}/agent-revisions/${ids.agent_revision_id}`, { key: reader.secret })
      )
      expect(revision).toMatchObject({ object: "agent_revision", id: ids.agent_revision_id, tool_ids: [] })
      const agent = expectSingle(yield* request("GET", `${P}/agents/${revision.agent_id}`, { key: reader.secret }))
      expect(agent.workspace_id).toBe(ids.workspace_id)
      const profile = expectSingle(
        yield* request("GET", `${P}/model-profiles/${revision.model_profile_id}`, { key: reader.secret })
      )
      expect(profile).toMatchObject({ provider: "scripted", has_credential: false })
      expect(profile.settings).toEqual({ steps: [{ type: "text", text: QUICKSTART_GREETING }] })
      expect(QUICKSTART_GREETING).toContain("{{input}}")

      // Exactly one of each, and the record names them all.
      for (const table of ["quickstarts", "service_actors", "workspaces", "model_profiles", "agents", "agent_revisions"]) {
        expect(yield* count(table, tenantId), table).toBe(1)
      }
      const [record] = yield* sql<{ agent_id: string; model_profile_id: string }>`
        SELECT agent_id, model_profile_id FROM quickstarts WHERE tenant_id = ${tenantId}`.pipe(Effect.orDie)
      expect(record).toEqual({ agent_id: agent.id, model_profile_id: profile.id })

      // Another tenant has its own.
      const other = yield* approve("Other")
      const otherIds = yield* getQuickstart(other.tenantId)
      for (const k of ["service_actor_id", "workspace_id", "agent_revision_id"] as const) {
        expect(otherIds[k]).not.toBe(ids[k])
      }
      expectError(
        yield* request("GET", `${P}/agent-revisions/${otherIds.agent_revision_id}`, { key: reader.secret }),
        404,
        "not_found"
      )
    }).pipe(Effect.provide(makeTestApp())))

  it.live("an environment without one (provisioned before quickstarts): concurrent first uses make exactly one", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const { tenantId } = yield* approve()
      const before = yield* getQuickstart(tenantId)
      // As if provisioned before this feature: no record (the old resources stay, orphaned).
      yield* sql`DELETE FROM quickstarts WHERE tenant_id = ${tenantId}`.pipe(Effect.orDie)

      const gets = Array.from({ length: 8 }, () => operator("GET", quickstartPath(tenantId)))
      const keys = Array.from(
        { length: 3 },
        (_, i) => operator("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, { name: `first ${i}` })
      )
      const replies = yield* Effect.all([...gets, ...keys], { concurrency: "unbounded" })
      for (const r of replies) expect([200, 201], r.text).toContain(r.status)
      const seen = replies.slice(0, gets.length).map((r) => r.body as Ids)
      const ids = seen[0]!
      for (const s of seen) expect(s).toEqual(ids)
      expect(ids.service_actor_id).not.toBe(before.service_actor_id)
      for (const k of replies.slice(gets.length)) expect(k.body.service_actor_id).toBe(ids.service_actor_id)
      expect(yield* getQuickstart(tenantId)).toEqual(ids)

      // One new set: the old one plus exactly one more of each resource.
      expect(yield* count("quickstarts", tenantId)).toBe(1)
      for (const table of ["service_actors", "workspaces", "model_profiles", "agents", "agent_revisions"]) {
        expect(yield* count(table, tenantId), table).toBe(2)
      }

      // A key made first (no record yet) makes the quickstart too.
      yield* sql`DELETE FROM quickstarts WHERE tenant_id = ${tenantId}`.pipe(Effect.orDie)
      const key = yield* createKey(tenantId, undefined, "first again")
      const made = yield* getQuickstart(tenantId)
      expect((key as any).service_actor_id).toBe(made.service_actor_id)
      expect(made.service_actor_id).not.toBe(ids.service_actor_id)
      expect(yield* count("service_actors", tenantId)).toBe(3)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("404 for an unknown or deleted tenant or environment, 400 for an unknown environment name, 401 without the operator token", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const sql = yield* SqlClient.SqlClient
      yield* getQuickstart(sb.tenantId)

      expectError(yield* operator("GET", quickstartPath("ten_nope")), 404, "not_found", "resource_missing")
      expectError(yield* operator("GET", quickstartPath(sb.tenantId, "production")), 404, "not_found", "resource_missing")
      expectError(yield* operator("GET", quickstartPath(sb.tenantId, "staging")), 400, "invalid_request")
      // A production key cannot be made either, so no quickstart appears there by the back door.
      const prodKey = yield* operator("POST", `/tenants/${sb.tenantId}/environments/production/api-keys`, { name: "x" })
      expect(prodKey.status, prodKey.text).toBe(404)
      const [prod] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM quickstarts WHERE environment = 'production'`.pipe(Effect.orDie)
      expect(prod!.n).toBe(0)

      const path = `/operator/v1${quickstartPath(sb.tenantId)}`
      expectError(yield* request("GET", path), 401, "authentication_error")
      expectError(yield* request("GET", path, { key: "op_not_the_token" }), 401, "authentication_error")
      expectError(yield* request("GET", path, { key: sb.key }), 401, "authentication_error")

      // The environment deleted: 404 at once; after the purge the record went with its service actor.
      const deleter = yield* createKey(sb.tenantId, ["environments:write"], "deleter")
      const deleted = yield* request("DELETE", sb.P, { key: deleter.secret })
      expect(deleted.status, deleted.text).toBe(202)
      expectError(yield* operator("GET", quickstartPath(sb.tenantId)), 404, "not_found")
      const late = yield* operator("POST", `/tenants/${sb.tenantId}/environments/sandbox/api-keys`, { name: "late" })
      expect(late.status, late.text).toBe(404)
      const deletions = yield* Deletions
      expect(yield* deletions.runDue).toBeGreaterThanOrEqual(1)
      const [job] = yield* sql<{ state: string; error: string | null }>`
        SELECT state, error FROM deletion_jobs WHERE tenant_id = ${sb.tenantId}`.pipe(Effect.orDie)
      expect(job, JSON.stringify(job)).toMatchObject({ state: "succeeded", error: null })
      expect(yield* count("quickstarts", sb.tenantId)).toBe(0)
      expect(yield* count("service_actors", sb.tenantId)).toBe(0)
      expectError(yield* operator("GET", quickstartPath(sb.tenantId)), 404, "not_found")
      expect(yield* count("quickstarts", sb.tenantId)).toBe(0)
    }).pipe(Effect.provide(makeTestApp({ purgeDelaySeconds: 0 }))))
})

// ---------------------------------------------------------------------------------------------
// QUICKSTART_MODEL

describe("QUICKSTART_MODEL", () => {
  it.effect("unset, empty or scripted: the scripted model; openai:/anthropic:<model> with the provider's key", () =>
    Effect.gen(function*() {
      expect(AppConfig.defaults().quickstartModel).toEqual({ provider: "scripted" })
      for (const env of [{}, { QUICKSTART_MODEL: "" }, { QUICKSTART_MODEL: "scripted" }, { OPENAI_API_KEY: "sk-x" }]) {
        const loaded = yield* loadSettings(env)
        expect(Either.isRight(loaded), JSON.stringify(env)).toBe(true)
        expect(Either.getOrThrow(loaded).quickstartModel).toEqual({ provider: "scripted" })
      }
      const openai = Either.getOrThrow(yield* loadSettings({ QUICKSTART_MODEL: "openai:gpt-4o-mini", OPENAI_API_KEY: "sk-a" }))
        .quickstartModel
      expect(openai).toMatchObject({ provider: "openai", model: "gpt-4o-mini" })
      expect(openai.provider !== "scripted" && Redacted.value(openai.apiKey)).toBe("sk-a")
      expect(String(openai.provider !== "scripted" && openai.apiKey)).not.toContain("sk-a")
      const anthropic = Either.getOrThrow(
        yield* loadSettings({ QUICKSTART_MODEL: "anthropic:claude-3-5-haiku-latest", ANTHROPIC_API_KEY: "sk-ant-b" })
      ).quickstartModel
      expect(anthropic).toMatchObject({ provider: "anthropic", model: "claude-3-5-haiku-latest" })
    }))

  it.effect("a malformed value or a missing key refuses the start with a clear message, never showing a key", () =>
    Effect.gen(function*() {
      const key = `sk-${randomBytes(12).toString("hex")}`
      const refusals: Array<[Record<string, string>, string]> = [
        [{ QUICKSTART_MODEL: "openai:gpt-4o-mini" }, "OPENAI_API_KEY is required"],
        [{ QUICKSTART_MODEL: "openai:gpt-4o-mini", OPENAI_API_KEY: "" }, "OPENAI_API_KEY is required"],
        [{ QUICKSTART_MODEL: "openai:gpt-4o-mini", ANTHROPIC_API_KEY: key }, "OPENAI_API_KEY is required"],
        [{ QUICKSTART_MODEL: "anthropic:claude", OPENAI_API_KEY: key }, "ANTHROPIC_API_KEY is required"],
        [{ QUICKSTART_MODEL: "gpt-4o-mini", OPENAI_API_KEY: key }, "QUICKSTART_MODEL must be"],
        [{ QUICKSTART_MODEL: "openai:", OPENAI_API_KEY: key }, "QUICKSTART_MODEL must be"],
        [{ QUICKSTART_MODEL: "openai", OPENAI_API_KEY: key }, "QUICKSTART_MODEL must be"],
        [{ QUICKSTART_MODEL: "gemini:pro", OPENAI_API_KEY: key }, "QUICKSTART_MODEL must be"],
        [{ QUICKSTART_MODEL: `openai:${"m".repeat(201)}`, OPENAI_API_KEY: key }, "QUICKSTART_MODEL must be"]
      ]
      for (const [env, message] of refusals) {
        const loaded = yield* loadSettings(env)
        expect(Either.isLeft(loaded), JSON.stringify(env)).toBe(true)
        const text = String(Either.isLeft(loaded) ? loaded.left : "")
        expect(text, JSON.stringify(env)).toContain(message)
        expect(text).not.toContain(key)
      }
    }))

  it.live("openai:<model>: the profile is openai with a credential; the key is in no response, log line or row", () => {
    const secret = `sk-proj-${randomBytes(24).toString("hex")}`
    const lines: Array<string> = []
    const output: Array<string> = []
    // Every log line of the app (all levels), as the default logger would print it.
    const capture = Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, (line) => void lines.push(line)))
    return Effect.gen(function*() {
      const loaded = yield* loadSettings({ QUICKSTART_MODEL: "openai:gpt-4o-mini", OPENAI_API_KEY: secret })
      const quickstartModel = Either.getOrThrow(loaded).quickstartModel
      const bodies: Array<string> = []
      const keep = (r: Reply) => {
        bodies.push(r.text, JSON.stringify([...r.headers.entries()]))
        return r
      }

      yield* Effect.gen(function*() {
        yield* captureOutput(output)
        const sql = yield* SqlClient.SqlClient
        const { replies, tenantId } = yield* approve()
        replies.forEach(keep)
        const first = keep(yield* operator("POST", `/tenants/${tenantId}/environments/sandbox/api-keys`, { name: "first" }))
        expect(first.status).toBe(201)
        const ids = keep(yield* operator("GET", quickstartPath(tenantId))).body as Ids
        const manager = yield* createKey(tenantId, ["agents:read", "agents:write", "keys:read"], "manager")
        const P = `/v1/tenants/${tenantId}/environments/sandbox`
        const revision = expectSingle(
          keep(yield* request("GET", `${P}/agent-revisions/${ids.agent_revision_id}`, { key: manager.secret }))
        )
        expect(revision.tool_ids).toEqual([])
        const profile = expectSingle(
          keep(yield* request("GET", `${P}/model-profiles/${revision.model_profile_id}`, { key: manager.secret }))
        )
        expect(profile).toMatchObject({ provider: "openai", model: "gpt-4o-mini", has_credential: true, settings: {} })
        expect(profile).not.toHaveProperty("credential")
        for (
          const suffix of ["/model-profiles", "/agents", "/workspaces", `/agents/${revision.agent_id}/revisions`, "/api-keys"]
        ) {
          expect(keep(yield* request("GET", `${P}${suffix}`, { key: manager.secret })).status, suffix).toBe(200)
        }
        // A profile made by a customer with the same model is unaffected (no credential of ours).
        const own = keep(
          yield* request("POST", `${P}/model-profiles`, {
            key: manager.secret,
            body: { name: "own", provider: "openai", model: "gpt-4o-mini" }
          })
        )
        expect(expectSingle(own, 201).has_credential).toBe(false)

        // Stored through the Secrets path: it decrypts, bound to the profile id.
        const agents = yield* Agents
        const credential = yield* agents.credentialOf(tenantId, "sandbox", profile.id)
        expect(Option.map(credential, Redacted.value)).toEqual(Option.some(secret))

        // Nowhere in plaintext (or hex/base64) in any row of any table.
        const encodings = [
          secret,
          secret.slice(8),
          Buffer.from(secret).toString("hex"),
          Buffer.from(secret).toString("base64"),
          Buffer.from(secret).toString("base64url")
        ].map((e) => e.toLowerCase())
        const tables = yield* sql<{ table_name: string }>`
          SELECT table_name FROM information_schema.tables
          WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`.pipe(Effect.orDie)
        expect(tables.map((t) => t.table_name)).toEqual(expect.arrayContaining(["quickstarts", "model_profiles"]))
        let rows = 0
        for (const { table_name } of tables) {
          const dump = yield* sql<{ j: string }>`SELECT row_to_json(t)::text AS j FROM ${sql(table_name)} t`.pipe(Effect.orDie)
          rows += dump.length
          for (const { j } of dump) {
            for (const e of encodings) expect(j.toLowerCase().includes(e), `${table_name} holds the key`).toBe(false)
          }
        }
        expect(rows).toBeGreaterThan(10)
      }).pipe(Effect.provide(makeTestApp({ quickstartModel })), Effect.scoped)

      expect(bodies.length).toBeGreaterThan(10)
      for (const text of bodies) {
        expect(text).not.toContain(secret)
        expect(text).not.toContain(secret.slice(8))
      }
      // The capture works (the provisioning line is there) and holds no key.
      expect(lines.some((l) => l.includes("quickstart provisioned") && l.includes("provider=openai"))).toBe(true)
      for (const line of [...lines, ...output]) {
        expect(line).not.toContain(secret)
        expect(line).not.toContain(secret.slice(8))
      }
    }).pipe(
      Effect.provide(capture),
      Logger.withMinimumLogLevel(LogLevel.All)
    )
  })
})
