/**
 * Environment settings (D16, D20) over real HTTP: the defaults, `audit_retention_days` (7..3650, a
 * key raises it and is refused lowering it: 403 `retention_lowering_forbidden`, nothing changed),
 * `default_model_profile_id` (a profile of this environment, used by revisions created without
 * `model_profile_id`), one field changed leaving the others, the settings scopes; the operator's
 * settings PATCH (`audit_retention_days` 7..3650 either way, `schedule_min_interval_seconds`
 * 1..3600, a strict body; also as the CLI's `set-setting`), audited as an operator action.
 */
import { createHash } from "node:crypto"

import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { canonicalJson } from "../src/Kernel/Json.js"
import { makeTestApp } from "./support/App.js"
import { cli } from "./support/Cli.js"
import { createKey, operator, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { AGENT_SCOPES, agentFixture, sandboxWithKey, scriptedProfile } from "./support/Sandboxes.js"

const SETTINGS_SCOPES = ["settings:read", "settings:write", ...AGENT_SCOPES]
const JWKS = { keys: [{ kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", kid: "k1" }] }
const IDP = { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: JWKS }

describe("environment settings (D16)", () => {
  it.live("defaults; audit_retention_days 7..3650; a field changed leaves the others", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(SETTINGS_SCOPES)
      const get = Effect.map(request("GET", `${sb.P}/settings`, { key: sb.manager }), (r) => expectSingle(r))
      const patch = (body: unknown) => request("PATCH", `${sb.P}/settings`, { key: sb.manager, body })

      expect(yield* get).toEqual({
        object: "settings",
        identity_provider: null,
        default_model_profile_id: null,
        audit_retention_days: 90,
        schedule_min_interval_seconds: 60,
        updated_at: null
      })
      expect(expectSingle(yield* patch({ identity_provider: IDP })).audit_retention_days).toBe(90)
      const changed = expectSingle(yield* patch({ audit_retention_days: 365 }))
      expect(changed).toMatchObject({ identity_provider: IDP, default_model_profile_id: null, audit_retention_days: 365 })
      expect(changed.updated_at).toMatch(/^\d{4}-\d{2}-\d{2}T/)
      expect(yield* get).toEqual(changed)
      expect(expectSingle(yield* patch({ audit_retention_days: 3650 })).audit_retention_days).toBe(3650)

      for (const bad of [0, 6, 3651, -1, 1.5, "30", null]) {
        expectError(yield* patch({ audit_retention_days: bad }), 400, "invalid_request", "parameter_invalid", "audit_retention_days")
      }
      expectError(yield* patch({ retention: 5 }), 400, "invalid_request", "unknown_parameter", "retention")
      // the operator's setting: shown, never set by a key
      expectError(
        yield* patch({ schedule_min_interval_seconds: 3600 }),
        400,
        "invalid_request",
        "unknown_parameter",
        "schedule_min_interval_seconds"
      )
      // an empty change changes nothing; removing the provider keeps the retention
      expect(expectSingle(yield* patch({})).audit_retention_days).toBe(3650)
      expect(expectSingle(yield* patch({ identity_provider: null }))).toMatchObject({ identity_provider: null, audit_retention_days: 3650 })
    }).pipe(Effect.provide(makeTestApp())))

  it.live("default_model_profile_id: a profile of this environment; revisions created without model_profile_id pin it", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(SETTINGS_SCOPES)
      const other = yield* sandboxWithKey(SETTINGS_SCOPES, "manager", "Other")
      const { agent, mp } = yield* agentFixture(sb.P, sb.manager, {
        profile: scriptedProfile([{ type: "text", text: "ok" }]),
        instructions: "Be brief.",
        tool_ids: []
      })
      const foreign = yield* agentFixture(other.P, other.manager, {
        profile: scriptedProfile([{ type: "text", text: "elsewhere" }]),
        instructions: "Be brief.",
        tool_ids: []
      })
      const patch = (body: unknown) => request("PATCH", `${sb.P}/settings`, { key: sb.manager, body })
      const revise = (body: Record<string, unknown>) =>
        request("POST", `${sb.P}/agents/${agent.id}/revisions`, { key: sb.manager, body: { instructions: "Hi.", tool_ids: [], ...body } })

      // without a default, model_profile_id is required
      expectError(yield* revise({}), 400, "invalid_request", "parameter_missing", "model_profile_id")
      // the default must be a profile of this environment
      for (const id of ["mp_missing", foreign.mp.id]) {
        expectError(yield* patch({ default_model_profile_id: id }), 400, "invalid_request", "parameter_invalid", "default_model_profile_id")
      }
      expectError(yield* patch({ default_model_profile_id: "" }), 400, "invalid_request", "parameter_invalid", "default_model_profile_id")
      const second = expectSingle(
        yield* request("POST", `${sb.P}/model-profiles`, { key: sb.manager, body: scriptedProfile([{ type: "text", text: "two" }]) }),
        201
      )
      expect(expectSingle(yield* patch({ default_model_profile_id: second.id })).default_model_profile_id).toBe(second.id)

      // a revision without model_profile_id pins the default (its content hash over the profile it pinned)
      const pinned = expectSingle(yield* revise({}), 201)
      expect(pinned.model_profile_id).toBe(second.id)
      expect(pinned.content_hash).toBe(
        createHash("sha256").update(canonicalJson({ model_profile_id: second.id, instructions: "Hi.", tool_ids: [] })).digest("hex")
      )
      // one that names a profile keeps it
      expect(expectSingle(yield* revise({ model_profile_id: mp.id }), 201).model_profile_id).toBe(mp.id)
      // changing the default changes no revision made before; removing it requires the field again
      expect(expectSingle(yield* patch({ default_model_profile_id: mp.id })).default_model_profile_id).toBe(mp.id)
      expect(expectSingle(yield* request("GET", `${sb.P}/agent-revisions/${pinned.id}`, { key: sb.manager })).model_profile_id).toBe(
        second.id
      )
      expect(expectSingle(yield* revise({}), 201).model_profile_id).toBe(mp.id)
      expect(expectSingle(yield* patch({ default_model_profile_id: null })).default_model_profile_id).toBeNull()
      expectError(yield* revise({}), 400, "invalid_request", "parameter_missing", "model_profile_id")
      // the other environment's settings are its own
      expect(expectSingle(yield* request("GET", `${other.P}/settings`, { key: other.manager })).default_model_profile_id).toBeNull()
    }).pipe(Effect.provide(makeTestApp())))

  it.live("scopes: settings:read to read, settings:write to change; another tenant's settings are 404", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(["settings:read"])
      const writer = yield* createKey(sb.tenantId, ["settings:write"], "writer")
      expectSingle(yield* request("GET", `${sb.P}/settings`, { key: sb.manager }))
      expectError(
        yield* request("PATCH", `${sb.P}/settings`, { key: sb.manager, body: { audit_retention_days: 100 } }),
        403,
        "permission_error",
        "missing_scope"
      )
      expectError(yield* request("GET", `${sb.P}/settings`, { key: writer.secret }), 403, "permission_error", "missing_scope")
      expect(expectSingle(yield* request("PATCH", `${sb.P}/settings`, { key: writer.secret, body: { audit_retention_days: 100 } })))
        .toMatchObject({ audit_retention_days: 100 })
      // the first key has neither
      expectErrorCode(yield* request("GET", `${sb.P}/settings`, { key: sb.key }), 403, "missing_scope")
      const other = yield* sandboxWithKey(["settings:read"], "manager", "Other")
      expectErrorCode(yield* request("GET", `${other.P}/settings`, { key: sb.manager }), 404, "resource_missing")
    }).pipe(Effect.provide(makeTestApp())))

  it.live("D20: a key raises audit_retention_days, never lowers it (403 retention_lowering_forbidden, nothing changed)", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(SETTINGS_SCOPES)
      const get = Effect.map(request("GET", `${sb.P}/settings`, { key: sb.manager }), (r) => expectSingle(r))
      const patch = (body: unknown) => request("PATCH", `${sb.P}/settings`, { key: sb.manager, body })
      // the default (90) counts as the current value; equal is no lowering
      for (const body of [{ audit_retention_days: 7 }, { audit_retention_days: 89, identity_provider: IDP }]) {
        const refused = yield* patch(body)
        expectError(refused, 403, "permission_error", "retention_lowering_forbidden")
        expect(refused.body.error.message).toContain("90 days")
      }
      expect(yield* get).toMatchObject({ identity_provider: null, audit_retention_days: 90, updated_at: null })
      expect(expectSingle(yield* patch({ audit_retention_days: 90 })).audit_retention_days).toBe(90)
      expect(expectSingle(yield* patch({ audit_retention_days: 120 })).audit_retention_days).toBe(120)
      expectError(yield* patch({ audit_retention_days: 119 }), 403, "permission_error", "retention_lowering_forbidden")
      expect((yield* get).audit_retention_days).toBe(120)
    }).pipe(Effect.provide(makeTestApp())))

  it.live("D20: the operator's settings PATCH sets audit_retention_days 7..3650 and schedule_min_interval_seconds, audited", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey([...SETTINGS_SCOPES, "audit:read"])
      const path = `/tenants/${sb.tenantId}/environments/sandbox/settings`
      const set = (body: unknown) => operator("PATCH", path, body)
      const get = Effect.map(request("GET", `${sb.P}/settings`, { key: sb.manager }), (r) => expectSingle(r))

      const lowered = yield* set({ audit_retention_days: 7 })
      expect(lowered.status, lowered.text).toBe(200)
      expect(lowered.body).toMatchObject({ object: "settings", audit_retention_days: 7, schedule_min_interval_seconds: 60 })
      expect(yield* get).toEqual(lowered.body)
      const both = yield* set({ audit_retention_days: 3650, schedule_min_interval_seconds: 1 })
      expect(both.body).toMatchObject({ audit_retention_days: 3650, schedule_min_interval_seconds: 1 })
      expect((yield* operator("GET", path)).body).toEqual(both.body)
      for (
        const [field, bad] of [["audit_retention_days", 6], ["audit_retention_days", 3651], ["schedule_min_interval_seconds", 0], [
          "schedule_min_interval_seconds",
          3601
        ]] as const
      ) {
        expectError(yield* set({ [field]: bad }), 400, "invalid_request", "parameter_invalid", field)
      }
      expectError(yield* set({ identity_provider: null }), 400, "invalid_request", "unknown_parameter", "identity_provider")
      expectErrorCode(
        yield* operator("PATCH", `/tenants/ten_nope/environments/sandbox/settings`, { audit_retention_days: 7 }),
        404,
        "resource_missing"
      )
      expectErrorCode(
        yield* request("PATCH", `/operator/v1${path}`, { key: sb.manager, body: { audit_retention_days: 7 } }),
        401,
        "invalid_operator_token"
      )
      expect((yield* get).audit_retention_days).toBe(3650)
      // the operator CLI's set-setting: the same PATCH
      const viaCli = yield* cli(["set-setting", "--tenant", sb.tenantId, "schedule_min_interval_seconds", "30", "--json"])
      expect(viaCli.code, viaCli.stderr).toBe(0)
      expect(JSON.parse(viaCli.stdout)).toMatchObject({ audit_retention_days: 3650, schedule_min_interval_seconds: 30 })

      // audited in the environment, as the operator
      const entries = expectList(yield* request("GET", `${sb.P}/audit?action=operatorUpdateSettings`, { key: sb.manager })).items
      expect(entries.map((e: any) => [e.actor, e.status])).toEqual([
        [{ type: "operator", id: "operator" }, 200],
        [{ type: "operator", id: "operator" }, 400],
        [{ type: "operator", id: "operator" }, 400],
        [{ type: "operator", id: "operator" }, 400],
        [{ type: "operator", id: "operator" }, 400],
        [{ type: "operator", id: "operator" }, 400],
        [{ type: "operator", id: "operator" }, 200],
        [{ type: "operator", id: "operator" }, 200]
      ])
    }).pipe(Effect.provide(makeTestApp())))
})
