/**
 * Customer tool connections (issue 5, D10) over HTTP: registration refuses unsafe destinations
 * and invalid schemas, tools exist only after the operator's review, and revisions reference only
 * reviewed tools of their own tenant and environment.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { TOOL_SCOPES } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { REFUND, toolHostSandbox, toolSettings } from "./support/ToolSandbox.js"

describe("connections", () => {
  it.live("registration refuses unsafe destinations and invalid schemas; tools exist only after review", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const key = (yield* createKey(sb.tenantId, TOOL_SCOPES, "manager")).secret
      const register = (body: unknown) => request("POST", `${sb.P}/connections`, { key, body })
      for (
        const url of [
          "http://tools.example.com",
          "https://10.0.0.8",
          "https://169.254.169.254",
          "https://localhost:8443",
          "https://2130706433",
          "https://[::ffff:127.0.0.2]"
        ]
      ) {
        expectErrorCode(yield* register(connectionBody(url)), 400, "destination_refused")
      }
      const bad = connectionBody("https://127.0.0.1:9")
      ;(bad.operations[0] as any).input_schema = { type: "objekt" }
      expectErrorCode(yield* register(bad), 400, "invalid_json_schema")
      const noRecon = connectionBody("https://127.0.0.1:9")
      delete (noRecon.operations[1] as any).reconciliation_path
      expectErrorCode(yield* register(noRecon), 400, "parameter_missing")

      const conn = expectSingle(yield* register(connectionBody("https://127.0.0.1:9")), 201)
      expect(conn.status).toBe("pending_review")
      const before = yield* request("GET", `${sb.P}/tools`, { key })
      expect(before.body.items).toEqual([])
      const reviewed = yield* operator("POST", `/connections/${conn.id}/review`, { decision: "approve" })
      expect(reviewed.body.tool_ids).toHaveLength(2)
      expectErrorCode(
        yield* operator("POST", `/connections/${conn.id}/review`, { decision: "approve" }),
        409,
        "connection_already_reviewed"
      )
      // the quickstart key cannot register tools
      expectErrorCode(
        yield* request("POST", `${sb.P}/connections`, { key: sb.key, body: connectionBody("https://127.0.0.1:9") }),
        403,
        "missing_scope"
      )
    }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))), 30_000)
})

describe("tool references", () => {
  it.live(
    "revisions reference only reviewed tools of their own tenant and environment; a rejected connection makes none",
    () =>
      Effect.gen(function*() {
        const s = yield* toolHostSandbox(REFUND)
        // another tenant, with a connection to the same host
        const other = yield* provisionSandbox(undefined, "Globex")
        const otherKey = (yield* createKey(other.tenantId, TOOL_SCOPES, "manager")).secret
        const otherCall = (method: string, path: string, body?: unknown) =>
          request(method, `${other.P}${path}`, { key: otherKey, ...(body === undefined ? {} : { body }) })
        const rejectedConn = expectSingle(yield* otherCall("POST", "/connections", connectionBody(s.host.baseUrl)), 201)
        const rejected = yield* operator("POST", `/connections/${rejectedConn.id}/review`, { decision: "reject", note: "unknown vendor" })
        expect(rejected.body).toMatchObject({ status: "rejected", tool_ids: [] })
        expect((yield* otherCall("GET", `/tools?connection_id=${rejectedConn.id}`)).body.items).toEqual([])

        const ws = expectSingle(yield* otherCall("POST", "/workspaces", { name: "W" }), 201)
        const mp = expectSingle(
          yield* otherCall("POST", "/model-profiles", { name: "s", provider: "scripted", model: "m", settings: { steps: REFUND } }),
          201
        )
        const agent = expectSingle(yield* otherCall("POST", "/agents", { workspace_id: ws.id, name: "A" }), 201)
        const revise = (tool_ids: ReadonlyArray<string>) =>
          otherCall("POST", `/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "x", tool_ids })
        const foreign = yield* revise([s.tools[0].id])
        expectErrorCode(foreign, 400, "unknown_tool")
        expect(foreign.body.error.param).toBe("tool_ids.0")
        expect((yield* otherCall("GET", `/tools/${s.tools[0].id}`)).status).toBe(404)
        // the control: its own reviewed tools are accepted
        const ownConn = expectSingle(yield* otherCall("POST", "/connections", connectionBody(s.host.baseUrl)), 201)
        const approved = yield* operator("POST", `/connections/${ownConn.id}/review`, { decision: "approve" })
        expect(expectSingle(yield* revise(approved.body.tool_ids), 201).tool_ids).toEqual(approved.body.tool_ids)
      }).pipe(Effect.scoped, Effect.provide(makeTestApp(toolSettings()))),
    30_000
  )
})
