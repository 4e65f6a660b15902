/**
 * Workspaces, model profiles, agents and immutable agent revisions (D12) end to end over HTTP:
 * create/get/list, scopes, tenancy, immutability (API and database), content hashes, provider
 * settings validation, write-only encrypted credentials.
 * (A little over 400 lines: it is the one `agents resources` describe block.)
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Option, Redacted } from "effect"
import { createHash, randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { Agents } from "../src/Agents.js"
import { AppConfig } from "../src/Config/AppConfig.js"
import { Secrets, secretsKeyFile } from "../src/Crypto/Secrets.js"
import { canonicalJson } from "../src/Kernel/Json.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, request } from "./support/Client.js"
import { expectError, expectList, expectSingle } from "./support/Envelopes.js"
import { AGENT_SCOPES, agentFixture, sandboxWithKey } from "./support/Sandboxes.js"

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/

/**
 * A sandbox with its quickstart key, a console key with the agents scopes, and the ids of the
 * quickstart's workspace, agent and model profile (made at provisioning, so listed last).
 */
const sandbox = (organization = "Acme") =>
  Effect.gen(function*() {
    const sb = yield* sandboxWithKey(AGENT_SCOPES, "agents", organization)
    const ids = (yield* operator("GET", `/tenants/${sb.tenantId}/environments/sandbox/quickstart`)).body
    const revision = (yield* request("GET", `${sb.P}/agent-revisions/${ids.agent_revision_id}`, { key: sb.manager })).body.data
    const qs = { workspace: ids.workspace_id as string, agent: revision.agent_id as string, profile: revision.model_profile_id as string }
    return { ...sb, qs }
  })

const SCRIPTED = {
  name: "script",
  provider: "scripted",
  model: "scripted-1",
  settings: {
    steps: [
      { type: "sleep", seconds: 1.5 },
      { type: "tool_call", tool: "lookup_order", input: { order_id: "o_1" } },
      { type: "text", text: "Hello {{input}}" },
      { type: "fail", message: "boom" }
    ]
  }
}

const post = (P: string, key: string, suffix: string, body: unknown, idempotencyKey?: string) =>
  request("POST", `${P}${suffix}`, { key, body, ...(idempotencyKey ? { idempotencyKey } : {}) })

/** workspace + scripted profile + agent + first revision */
const fixture = (P: string, key: string) => agentFixture(P, key, { profile: SCRIPTED, instructions: "Be brief.", tool_ids: [] })

describe("agents resources (D12)", () => {
  it.live("create, get and list workspaces, model profiles, agents and revisions", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const { P, manager } = sb
      const { agent, mp, rev, ws } = yield* fixture(P, manager)

      expect(ws.id).toMatch(/^ws_/)
      expect(ws).toMatchObject({ object: "workspace", name: "Support" })
      expect(ws.created_at).toMatch(RFC3339)
      expect(ws.updated_at).toMatch(RFC3339)
      expect(expectSingle(yield* request("GET", `${P}/workspaces/${ws.id}`, { key: manager }))).toEqual(ws)

      expect(mp.id).toMatch(/^mp_/)
      expect(mp).toMatchObject({ object: "model_profile", provider: "scripted", model: "scripted-1", has_credential: false })
      expect(mp.settings).toEqual(SCRIPTED.settings)
      expect(mp.created_at).toMatch(RFC3339)
      expect(expectSingle(yield* request("GET", `${P}/model-profiles/${mp.id}`, { key: manager }))).toEqual(mp)

      expect(agent.id).toMatch(/^agent_/)
      expect(agent).toMatchObject({ object: "agent", name: "Helper", workspace_id: ws.id })
      expect(agent.created_at).toMatch(RFC3339)
      expect(expectSingle(yield* request("GET", `${P}/agents/${agent.id}`, { key: manager }))).toEqual(agent)

      expect(rev.id).toMatch(/^rev_/)
      expect(rev).toMatchObject({
        object: "agent_revision",
        agent_id: agent.id,
        model_profile_id: mp.id,
        instructions: "Be brief.",
        tool_ids: [],
        memory: false
      })
      expect(rev.created_at).toMatch(RFC3339)
      expect(Object.keys(rev).sort()).toEqual(
        ["agent_id", "content_hash", "created_at", "id", "instructions", "memory", "model_profile_id", "object", "tool_ids"]
      )
      expect(expectSingle(yield* request("GET", `${P}/agent-revisions/${rev.id}`, { key: manager }))).toEqual(rev)

      // Lists, newest first, paged with D6 cursors.
      const ws2 = expectSingle(yield* post(P, manager, "/workspaces", { name: "Sales" }), 201)
      const page1 = expectList(yield* request("GET", `${P}/workspaces?limit=1`, { key: manager }))
      expect(page1.items.map((w) => w.id)).toEqual([ws2.id])
      expect(page1.next_cursor).not.toBeNull()
      const page2 = expectList(
        yield* request("GET", `${P}/workspaces?limit=1&cursor=${page1.next_cursor}`, { key: manager })
      )
      expect(page2.items.map((w) => w.id)).toEqual([ws.id])
      // The last page: the quickstart's workspace, made at provisioning.
      const page3 = expectList(
        yield* request("GET", `${P}/workspaces?limit=1&cursor=${page2.next_cursor}`, { key: manager })
      )
      expect(page3.items.map((w) => w.id)).toEqual([sb.qs.workspace])
      expect(page3.next_cursor).toBeNull()
      // A cursor of another list is refused.
      expectError(
        yield* request("GET", `${P}/agents?limit=1&cursor=${page1.next_cursor}`, { key: manager }),
        400,
        "invalid_request",
        "invalid_cursor"
      )
      expect(expectList(yield* request("GET", `${P}/model-profiles`, { key: manager })).items)
        .toEqual([mp, expect.objectContaining({ id: sb.qs.profile })])
      expect(expectList(yield* request("GET", `${P}/agents`, { key: manager })).items)
        .toEqual([agent, expect.objectContaining({ id: sb.qs.agent })])

      const rev2 = expectSingle(
        yield* post(P, manager, `/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "Be kind.", tool_ids: [] }),
        201
      )
      const revs = expectList(yield* request("GET", `${P}/agents/${agent.id}/revisions`, { key: manager }))
      expect(revs.items.map((r) => r.id)).toEqual([rev2.id, rev.id])
      const revPage = expectList(yield* request("GET", `${P}/agents/${agent.id}/revisions?limit=1`, { key: manager }))
      expect(revPage.items.map((r) => r.id)).toEqual([rev2.id])
      const revPage2 = expectList(
        yield* request("GET", `${P}/agents/${agent.id}/revisions?limit=1&cursor=${revPage.next_cursor}`, { key: manager })
      )
      expect(revPage2.items.map((r) => r.id)).toEqual([rev.id])

      // Unknown ids are 404 naming the parameter.
      expectError(yield* request("GET", `${P}/workspaces/ws_nope`, { key: manager }), 404, "not_found", "resource_missing", "workspace_id")
      expectError(
        yield* request("GET", `${P}/agents/agent_nope/revisions`, { key: manager }),
        404,
        "not_found",
        "resource_missing",
        "agent_id"
      )
      expectError(
        yield* post(P, manager, "/agents/agent_nope/revisions", { model_profile_id: mp.id, instructions: "", tool_ids: [] }),
        404,
        "not_found",
        "resource_missing",
        "agent_id"
      )
      expectError(
        yield* post(P, manager, `/agents/${agent.id}/revisions`, { model_profile_id: "mp_nope", instructions: "", tool_ids: [] }),
        404,
        "not_found",
        "resource_missing",
        "model_profile_id"
      )
      expectError(
        yield* post(P, manager, "/agents", { workspace_id: "ws_nope", name: "x" }),
        404,
        "not_found",
        "resource_missing",
        "workspace_id"
      )
      // Body validation.
      expectError(yield* post(P, manager, "/workspaces", { name: "" }), 400, "invalid_request", "parameter_invalid", "name")
      expectError(
        yield* post(P, manager, "/model-profiles", { ...SCRIPTED, provider: "gemini" }),
        400,
        "invalid_request",
        "parameter_invalid",
        "provider"
      )
    }).pipe(Effect.provide(makeTestApp())))

  it.live("the quickstart key gets 403 missing_scope; a read-only key cannot create", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const { ws, mp, agent } = yield* fixture(sb.P, sb.manager)
      const creates: Array<[string, unknown]> = [
        ["/workspaces", { name: "W" }],
        ["/model-profiles", SCRIPTED],
        ["/agents", { workspace_id: ws.id, name: "A" }],
        [`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "x", tool_ids: [] }]
      ]
      for (const [suffix, body] of creates) {
        expectError(yield* post(sb.P, sb.key, suffix, body), 403, "permission_error", "missing_scope")
      }
      for (const suffix of ["/workspaces", "/model-profiles", "/agents", `/agents/${agent.id}/revisions`]) {
        expectError(yield* request("GET", `${sb.P}${suffix}`, { key: sb.key }), 403, "permission_error", "missing_scope")
      }
      const reader = yield* createKey(sb.tenantId, ["agents:read"], "reader")
      expectList(yield* request("GET", `${sb.P}/agents`, { key: reader.secret }))
      expectError(yield* post(sb.P, reader.secret, "/workspaces", { name: "W" }), 403, "permission_error", "missing_scope")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("another tenant's ids are 404, never 403, and cannot be referenced", () =>
    Effect.gen(function*() {
      const a = yield* sandbox("Alpha")
      const b = yield* sandbox("Beta")
      const fa = yield* fixture(a.P, a.manager)
      const fb = yield* fixture(b.P, b.manager)
      const gets: Array<[string, string]> = [
        [`/workspaces/${fa.ws.id}`, "workspace_id"],
        [`/model-profiles/${fa.mp.id}`, "model_profile_id"],
        [`/agents/${fa.agent.id}`, "agent_id"],
        [`/agents/${fa.agent.id}/revisions`, "agent_id"],
        [`/agent-revisions/${fa.rev.id}`, "revision_id"]
      ]
      for (const [suffix, param] of gets) {
        expectError(yield* request("GET", `${b.P}${suffix}`, { key: b.manager }), 404, "not_found", "resource_missing", param)
        // B's key on A's path: the environment of another tenant is 404 too.
        expectError(yield* request("GET", `${a.P}${suffix}`, { key: b.manager }), 404, "not_found")
      }
      // A's workspace / profile / agent cannot be used from B.
      expectError(
        yield* post(b.P, b.manager, "/agents", { workspace_id: fa.ws.id, name: "x" }),
        404,
        "not_found",
        "resource_missing",
        "workspace_id"
      )
      expectError(
        yield* post(b.P, b.manager, `/agents/${fb.agent.id}/revisions`, { model_profile_id: fa.mp.id, instructions: "", tool_ids: [] }),
        404,
        "not_found",
        "resource_missing",
        "model_profile_id"
      )
      expectError(
        yield* post(b.P, b.manager, `/agents/${fa.agent.id}/revisions`, { model_profile_id: fb.mp.id, instructions: "", tool_ids: [] }),
        404,
        "not_found",
        "resource_missing",
        "agent_id"
      )
      // Lists show only the caller's own.
      expect(expectList(yield* request("GET", `${b.P}/agents`, { key: b.manager })).items.map((x) => x.id))
        .toEqual([fb.agent.id, b.qs.agent])
      expect(expectList(yield* request("GET", `${b.P}/workspaces`, { key: b.manager })).items.map((x) => x.id))
        .toEqual([fb.ws.id, b.qs.workspace])
    }).pipe(Effect.provide(makeTestApp())))

  it.live("revisions are immutable: no update route, and the database refuses UPDATE, DELETE and TRUNCATE", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const { agent, rev } = yield* fixture(sb.P, sb.manager)
      for (const method of ["PATCH", "PUT", "DELETE"]) {
        // the revision's path answers GET only (405 with Allow); the other is no path at all
        const readOnly = yield* request(method, `${sb.P}/agent-revisions/${rev.id}`, { key: sb.manager, body: { instructions: "changed" } })
        expectError(readOnly, 405, "invalid_request", "method_not_allowed")
        expect(readOnly.headers.get("allow")).toBe("GET, HEAD")
        const none = yield* request(method, `${sb.P}/agents/${agent.id}/revisions/${rev.id}`, {
          key: sb.manager,
          body: { instructions: "changed" }
        })
        expectError(none, 404, "not_found", "route_not_found")
      }
      const sql = yield* SqlClient.SqlClient
      const refusal = (e: unknown) => String((e as { cause?: { message?: string } }).cause?.message)
      const update = yield* Effect.flip(sql`UPDATE agent_revisions SET instructions = 'changed' WHERE id = ${rev.id}`)
      expect(refusal(update)).toMatch(/agent revisions are immutable \(UPDATE refused\)/)
      const del = yield* Effect.flip(sql`DELETE FROM agent_revisions WHERE id = ${rev.id}`)
      expect(refusal(del)).toMatch(/agent revisions are immutable \(DELETE refused\)/)
      const truncate = yield* Effect.flip(sql`TRUNCATE agent_revisions CASCADE`)
      expect(refusal(truncate)).toMatch(/agent revisions are immutable \(TRUNCATE refused\)/)
      const rows = yield* sql<{ instructions: string }>`SELECT instructions FROM agent_revisions WHERE id = ${rev.id}`.pipe(Effect.orDie)
      expect(rows).toEqual([{ instructions: "Be brief." }])
      expect(expectSingle(yield* request("GET", `${sb.P}/agent-revisions/${rev.id}`, { key: sb.manager }))).toEqual(rev)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("content_hash: SHA-256 of the canonical content, stable for the same content, different otherwise", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const { agent, mp, rev } = yield* fixture(sb.P, sb.manager)
      const expected = createHash("sha256")
        .update(canonicalJson({ model_profile_id: mp.id, instructions: "Be brief.", tool_ids: [] }))
        .digest("hex")
      expect(rev.content_hash).toBe(expected)
      // Same content (keys in another order): a new revision with the same hash.
      const same = expectSingle(
        yield* request("POST", `${sb.P}/agents/${agent.id}/revisions`, {
          key: sb.manager,
          rawBody: `{"tool_ids":[],"instructions":"Be brief.","model_profile_id":"${mp.id}"}`
        }),
        201
      )
      expect(same.id).not.toBe(rev.id)
      expect(same.content_hash).toBe(rev.content_hash)
      const other = expectSingle(
        yield* post(sb.P, sb.manager, `/agents/${agent.id}/revisions`, {
          model_profile_id: mp.id,
          instructions: "Be brief!",
          tool_ids: []
        }),
        201
      )
      expect(other.content_hash).not.toBe(rev.content_hash)
      const mp2 = expectSingle(yield* post(sb.P, sb.manager, "/model-profiles", { ...SCRIPTED, name: "other" }), 201)
      const otherProfile = expectSingle(
        yield* post(sb.P, sb.manager, `/agents/${agent.id}/revisions`, {
          model_profile_id: mp2.id,
          instructions: "Be brief.",
          tool_ids: []
        }),
        201
      )
      expect(otherProfile.content_hash).not.toBe(rev.content_hash)
      // Tools arrive with issue 5: any tool id is unknown for now.
      expectError(
        yield* post(sb.P, sb.manager, `/agents/${agent.id}/revisions`, {
          model_profile_id: mp.id,
          instructions: "x",
          tool_ids: ["tool_1"]
        }),
        400,
        "invalid_request",
        "unknown_tool",
        "tool_ids.0"
      )
    }).pipe(Effect.provide(makeTestApp())))

  it.live("model profile settings: scripted steps exactly as D12, openai_compatible needs an http(s) base_url", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const profile = (provider: string, settings?: unknown) =>
        post(sb.P, sb.manager, "/model-profiles", {
          name: "p",
          provider,
          model: "m",
          ...(settings !== undefined ? { settings } : {})
        })
      expectSingle(yield* profile("scripted", SCRIPTED.settings), 201)
      expectSingle(yield* profile("scripted", { steps: [{ type: "sleep", seconds: 300 }, { type: "text", text: "" }] }), 201)
      const good = { type: "text", text: "ok" }
      const malformed: Array<unknown> = [
        { type: "dance" },
        { type: "text" },
        { type: "text", text: 5 },
        { type: "tool_call", input: {} },
        { type: "tool_call", tool: "x" },
        { type: "tool_call", tool: "x", input: [1] },
        { type: "tool_call", tool: "", input: {} },
        { type: "fail" },
        { type: "sleep", seconds: 0 },
        { type: "sleep", seconds: -1 },
        { type: "sleep", seconds: 301 },
        { type: "sleep", seconds: "5" },
        { type: "sleep" },
        "text",
        null
      ]
      for (const step of malformed) {
        const res = yield* profile("scripted", { steps: [good, good, step] })
        expect(res.status, JSON.stringify(step)).toBe(400)
        expectError(res, 400, "invalid_request", undefined, "settings.steps.2")
        expect(["parameter_invalid", "parameter_missing"]).toContain(res.body.error.code)
      }
      expectError(yield* profile("scripted", { steps: [] }), 400, "invalid_request", "parameter_invalid", "settings.steps")
      expectError(yield* profile("scripted", { steps: "text" }), 400, "invalid_request", "parameter_invalid", "settings.steps")
      expectError(yield* profile("scripted", {}), 400, "invalid_request", "parameter_missing", "settings.steps")
      expectError(yield* profile("scripted"), 400, "invalid_request", "parameter_missing", "settings.steps")

      expectError(yield* profile("openai_compatible"), 400, "invalid_request", "parameter_missing", "settings.base_url")
      expectError(
        yield* profile("openai_compatible", { base_url: "ftp://example.test" }),
        400,
        "invalid_request",
        "parameter_invalid",
        "settings.base_url"
      )
      expectError(
        yield* profile("openai_compatible", { base_url: "not a url" }),
        400,
        "invalid_request",
        "parameter_invalid",
        "settings.base_url"
      )
      // the customer's model server is a destination like a tool's (D10): no local or private
      // addresses, https only, unless the operator's DESTINATION_ALLOWLIST admits it
      for (
        const base_url of [
          "http://127.0.0.1:11434/v1",
          "https://10.0.0.7/v1",
          "https://169.254.169.254/v1",
          "https://localhost/v1",
          "http://93.184.216.34/v1"
        ]
      ) {
        expectError(yield* profile("openai_compatible", { base_url }), 400, "invalid_request", "destination_refused", "settings.base_url")
      }
      const compat = expectSingle(yield* profile("openai_compatible", { base_url: "https://93.184.216.34/v1" }), 201)
      expect(compat.settings).toEqual({ base_url: "https://93.184.216.34/v1" })
      const openai = expectSingle(yield* profile("openai"), 201)
      expect(openai.settings).toEqual({})
      expectSingle(yield* profile("anthropic", { max_tokens: 1024 }), 201)
      // Refused profiles were not stored.
      const sql = yield* SqlClient.SqlClient
      const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM model_profiles WHERE id <> ${sb.qs.profile}`
        .pipe(Effect.orDie)
      expect(count!.n).toBe(5)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("credentials are write-only: never in a response or replay, encrypted at rest, decryptable", () =>
    Effect.gen(function*() {
      const sb = yield* sandbox()
      const credential = `sk-cred-${randomBytes(16).toString("hex")}`
      const body = { name: "prod", provider: "openai", model: "gpt-4.1", credential }
      const bodies: Array<string> = []

      const first = yield* post(sb.P, sb.manager, "/model-profiles", body, "create-profile-1")
      const mp = expectSingle(first, 201)
      bodies.push(first.text)
      expect(mp.has_credential).toBe(true)
      expect(mp).not.toHaveProperty("credential")
      const replay = yield* post(sb.P, sb.manager, "/model-profiles", body, "create-profile-1")
      expect(replay.status).toBe(201)
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
      expect(replay.body.data.id).toBe(mp.id)
      bodies.push(replay.text)
      bodies.push((yield* request("GET", `${sb.P}/model-profiles/${mp.id}`, { key: sb.manager })).text)
      bodies.push((yield* request("GET", `${sb.P}/model-profiles`, { key: sb.manager })).text)
      // A failed create (bad settings) does not echo it either.
      const bad = yield* post(sb.P, sb.manager, "/model-profiles", { ...body, provider: "openai_compatible" })
      expect(bad.status).toBe(400)
      bodies.push(bad.text)
      for (const text of bodies) {
        expect(text).not.toContain(credential)
        expect(text).not.toContain(credential.slice(8))
      }

      // Not in any column of model_profiles, nor in the stored idempotent responses.
      const sql = yield* SqlClient.SqlClient
      const encodings = [
        credential,
        credential.slice(8),
        Buffer.from(credential).toString("hex"),
        Buffer.from(credential).toString("base64")
      ]
      const rows = yield* sql<{ j: string }>`SELECT row_to_json(t)::text AS j FROM model_profiles t`.pipe(Effect.orDie)
      const stored = yield* sql<{ j: string }>`SELECT row_to_json(t)::text AS j FROM idempotency_keys t`.pipe(Effect.orDie)
      expect(rows.length).toBe(2) // this one and the quickstart's
      for (const { j } of [...rows, ...stored]) {
        for (const e of encodings) expect(j.toLowerCase()).not.toContain(e.toLowerCase())
      }
      const [row] = yield* sql<{ credential_ciphertext: Uint8Array; credential_iv: Uint8Array; credential_tag: Uint8Array }>`
        SELECT credential_ciphertext, credential_iv, credential_tag FROM model_profiles WHERE id = ${mp.id}`.pipe(Effect.orDie)
      expect(row!.credential_iv.length).toBe(12)
      expect(row!.credential_tag.length).toBe(16)
      expect(Buffer.from(row!.credential_ciphertext).toString("utf8")).not.toContain(credential)

      // It decrypts back with the Secrets service (bound to the profile id) and through Agents.
      const secrets = yield* Secrets
      const plain = yield* secrets.decrypt({
        ciphertext: row!.credential_ciphertext,
        iv: row!.credential_iv,
        tag: row!.credential_tag
      }, mp.id)
      expect(Redacted.value(plain)).toBe(credential)
      const wrongContext = yield* Effect.exit(secrets.decrypt({
        ciphertext: row!.credential_ciphertext,
        iv: row!.credential_iv,
        tag: row!.credential_tag
      }, "mp_other"))
      expect(Exit.isFailure(wrongContext)).toBe(true)
      const agents = yield* Agents
      const viaAgents = yield* agents.credentialOf(sb.tenantId, "sandbox", mp.id)
      expect(Option.map(viaAgents, Redacted.value)).toEqual(Option.some(credential))
      expect(String(plain)).not.toContain(credential)

      // The app generated its key file (no SECRETS_KEY in tests): mode 0600.
      const settings = yield* AppConfig
      expect(fs.statSync(secretsKeyFile(settings.dataDir)).mode & 0o777).toBe(0o600)
    }).pipe(Effect.provide(makeTestApp())))
})
