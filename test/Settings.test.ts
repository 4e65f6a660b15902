/**
 * Environment settings (D16) over real HTTP: the defaults, `audit_retention_days` (1..3650),
 * `default_model_profile_id` (a profile of this environment, used by revisions created without
 * `model_profile_id`), one field changed leaving the others, and the settings scopes.
 */
import { createHash } from "node:crypto"

import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { canonicalJson } from "../src/Kernel/Json.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectError, expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { AGENT_SCOPES, agentFixture, sandboxWithKey, scriptedProfile } from "./support/Sandboxes.js"

const SETTINGS_SCOPES = ["settings:read", "settings:write", ...AGENT_SCOPES]
const JWKS = { keys: [{ kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", kid: "k1" }] }
const IDP = { issuer: "https://idp.acme.test", audience: "agent-platform", jwks: JWKS }

describe("environment settings (D16)", () => {
  it.live("defaults; audit_retention_days 1..3650; a field changed leaves the others", () =>
    Effect.gen(function*() {
      const sb = yield* sandboxWithKey(SETTINGS_SCOPES)
      const get = Effect.map(request("GET", `${sb.P}/settings`, { key: sb.manager }), (r) => expectSingle(r))
      const patch = (body: unknown) => request("PATCH", `${sb.P}/settings`, { key: sb.manager, body })

      expect(yield* get).toEqual({
        object: "settings",
        identity_provider: null,
        default_model_profile_id: null,
        audit_retention_days: 90,
        updated_at: null
      })
      expect(expectSingle(yield* patch({ identity_provider: IDP })).audit_retention_days).toBe(90)
      const changed = expectSingle(yield* patch({ audit_retention_days: 30 }))
      expect(changed).toMatchObject({ identity_provider: IDP, default_model_profile_id: null, audit_retention_days: 30 })
      expect(changed.updated_at).toMatch(/^\d{4}-\d{2}-\d{2}T/)
      expect(yield* get).toEqual(changed)
      for (const days of [1, 3650]) expect(expectSingle(yield* patch({ audit_retention_days: days })).audit_retention_days).toBe(days)

      for (const bad of [0, 3651, -1, 1.5, "30", null]) {
        expectError(yield* patch({ audit_retention_days: bad }), 400, "invalid_request", "parameter_invalid", "audit_retention_days")
      }
      expectError(yield* patch({ retention: 5 }), 400, "invalid_request", "unknown_parameter", "retention")
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
        yield* request("PATCH", `${sb.P}/settings`, { key: sb.manager, body: { audit_retention_days: 7 } }),
        403,
        "permission_error",
        "missing_scope"
      )
      expectError(yield* request("GET", `${sb.P}/settings`, { key: writer.secret }), 403, "permission_error", "missing_scope")
      expect(expectSingle(yield* request("PATCH", `${sb.P}/settings`, { key: writer.secret, body: { audit_retention_days: 7 } })))
        .toMatchObject({ audit_retention_days: 7 })
      // the first key has neither
      expectErrorCode(yield* request("GET", `${sb.P}/settings`, { key: sb.key }), 403, "missing_scope")
      const other = yield* sandboxWithKey(["settings:read"], "manager", "Other")
      expectErrorCode(yield* request("GET", `${other.P}/settings`, { key: sb.manager }), 404, "resource_missing")
    }).pipe(Effect.provide(makeTestApp())))
})
