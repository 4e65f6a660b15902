/**
 * The OpenAPI document (contract 9, D1) served at /v1/openapi.json: version and security scheme;
 * every /v1 operation's stage, visibility, statuses, security and Idempotency-Key; the contract's
 * operationIds with their scopes; no decode errors, dangling $ref or operator paths. And /docs,
 * /healthz and /readyz.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { request } from "./support/Client.js"
import { expectCommonHeaders } from "./support/Envelopes.js"

layer(makeTestApp(), { excludeTestServices: true })("OpenAPI document and system endpoints (contract 9, D1)", (it) => {
  const CONTRACT: Record<string, [string, string, string, string]> = {
    listTenants: ["get", "/v1/tenants", "tenants:read", "200"],
    getTenant: ["get", "/v1/tenants/{tenant_id}", "tenants:read", "200"],
    updateTenant: ["patch", "/v1/tenants/{tenant_id}", "tenants:write", "200"],
    deleteTenant: ["delete", "/v1/tenants/{tenant_id}", "tenants:write", "202"],
    listEnvironments: ["get", "/v1/tenants/{tenant_id}/environments", "environments:read", "200"],
    getEnvironment: ["get", "/v1/tenants/{tenant_id}/environments/{environment}", "environments:read", "200"],
    deleteEnvironment: ["delete", "/v1/tenants/{tenant_id}/environments/{environment}", "environments:write", "202"],
    listApiKey: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys", "keys:read", "200"],
    getApiKey: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys/{key_id}", "keys:read", "200"],
    revokeApiKey: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/api-keys/{key_id}/revoke", "keys:revoke", "200"],
    listUser: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/users", "users:read", "200"],
    createUser: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/users", "users:write", "201"],
    getUser: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:read", "200"],
    updateUser: ["patch", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:write", "200"],
    deleteUser: ["delete", "/v1/tenants/{tenant_id}/environments/{environment}/users/{user_id}", "users:write", "202"],
    listServiceActor: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/service-actors", "service-actors:read", "200"],
    createServiceActor: ["post", "/v1/tenants/{tenant_id}/environments/{environment}/service-actors", "service-actors:write", "201"],
    getServiceActor: [
      "get",
      "/v1/tenants/{tenant_id}/environments/{environment}/service-actors/{service_actor_id}",
      "service-actors:read",
      "200"
    ],
    // D16
    getSettings: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/settings", "settings:read", "200"],
    updateSettings: ["patch", "/v1/tenants/{tenant_id}/environments/{environment}/settings", "settings:write", "200"],
    listAuditEntries: ["get", "/v1/tenants/{tenant_id}/environments/{environment}/audit", "audit:read", "200"]
  }
  /** The filters a list takes beside `cursor` and `limit`. */
  const LIST_FILTERS: Record<string, ReadonlyArray<string>> = {
    listAuditEntries: ["action", "actor_id", "from", "resource_id", "to"]
  }
  const ERRORS = ["400", "401", "403", "404", "409", "410", "429", "503"]

  const fetchDoc = Effect.map(request("GET", "/v1/openapi.json"), (res) => {
    expect(res.status).toBe(200)
    expectCommonHeaders(res)
    return res.body as any
  })
  const operations = (doc: any) =>
    Object.entries<any>(doc.paths).flatMap(([path, item]) =>
      Object.entries<any>(item)
        .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
        .map(([method, op]) => ({ path, method, op }))
    )

  it.effect("document header: OpenAPI 3.1, info.version 0.1.0-draft.3, ServiceKey bearer", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      expect(doc.openapi).toMatch(/^3\.1/)
      expect(doc.info.version).toBe("0.1.0-draft.3")
      expect(doc.components.securitySchemes.ServiceKey).toMatchObject({ type: "http", scheme: "bearer" })
      expect(Object.keys(doc.components.securitySchemes)).toEqual(["ServiceKey"])
      // Served without a key, and a bad key does not matter.
      const withGarbage = yield* request("GET", "/v1/openapi.json", { key: "garbage" })
      expect(withGarbage.status).toBe(200)
      expect(withGarbage.body.info.version).toBe("0.1.0-draft.3")
    }))

  it.effect("every /v1 operation: stage, visibility, statuses, security; contract operationIds with their scopes", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      const v1 = operations(doc).filter((o) => o.path.startsWith("/v1/"))
      expect(v1.length).toBeGreaterThanOrEqual(Object.keys(CONTRACT).length)
      const byId = new Map(v1.map((o) => [o.op.operationId, o]))
      for (const { path, method, op } of v1) {
        const label = `${method} ${path}`
        expect(op["x-release-stage"], label).toBe("proposed")
        expect(op["x-visibility"], label).toBe("public")
        const statuses = Object.keys(op.responses)
        for (const s of ERRORS) expect(statuses, label).toContain(s)
        // createRun: the durable 202, or 200 with a terminal run under `Prefer: wait` (D7).
        // downloadFile (D13): 200, or 206 for a range, 304 for a matching If-None-Match, 416 past the end.
        const success = statuses.filter((s) =>
          !ERRORS.includes(s) && !(op.operationId === "createRun" && s === "200") &&
          !(op.operationId === "downloadFile" && ["206", "304", "416"].includes(s))
        )
        expect(success.length, label).toBe(1)
        expect(success[0], label).toMatch(/^2\d\d$/)
        if (op.operationId === "createRun") expect(statuses, label).toEqual(expect.arrayContaining(["200", "202"]))
        if (op.operationId === "getJwks") {
          // D10: the key set tool servers verify with is public.
          expect(op.security ?? [], label).toEqual([])
        } else {
          expect(op.security, label).toHaveLength(1)
          expect(Object.keys(op.security[0]), label).toEqual(["ServiceKey"])
          // Every operation names its scopes, except polling a deletion job: any key of the
          // environment may follow the Location its delete returned.
          if (op.operationId === "getDeletionJob") expect(op.security[0].ServiceKey, label).toEqual([])
          else expect(op.security[0].ServiceKey.length, label).toBeGreaterThan(0)
        }
        if (success[0] === "202") {
          expect(op.responses["202"].headers?.Location, label).toBeDefined()
        }
        for (const s of ERRORS) {
          expect(op.responses[s].content["application/json"].schema.$ref, `${label} ${s}`).toMatch(/^#\/components\/schemas\//)
        }
        if (["post", "patch", "put", "delete"].includes(method)) {
          const idem = (op.parameters ?? []).find((p: any) => p.in === "header" && p.name === "Idempotency-Key")
          expect(idem, label).toBeDefined()
          expect(idem.required, label).toBe(true)
        }
        // header parameters are named as clients write them (X-Actor-Token, Prefer, Last-Event-ID)
        for (const p of (op.parameters ?? []).filter((p: any) => p.in === "header")) {
          expect(p.name, label).toMatch(/^[A-Z][A-Za-z]*(-[A-Z][A-Za-z]*)*$/)
        }
      }
      for (const [operationId, [method, path, scope, success]] of Object.entries(CONTRACT)) {
        const found = byId.get(operationId)
        expect(found, operationId).toBeDefined()
        expect(found!.method, operationId).toBe(method)
        expect(found!.path, operationId).toBe(path)
        expect(found!.op.security, operationId).toEqual([{ ServiceKey: [scope] }])
        expect(Object.keys(found!.op.responses), operationId).toContain(success)
        if (operationId.startsWith("list")) {
          const names = (found!.op.parameters ?? []).filter((p: any) => p.in === "query").map((p: any) => p.name).sort()
          expect(names, operationId).toEqual(["cursor", "limit", ...(LIST_FILTERS[operationId] ?? [])].sort())
          const limit = found!.op.parameters.find((p: any) => p.in === "query" && p.name === "limit")
          expect(limit.schema, operationId).toMatchObject({ type: "integer", minimum: 1, maximum: 100, default: 50 })
        }
      }
      // The error responses document the D3 envelope.
      const err = doc.components.schemas.InvalidRequestError
      expect(err.required.sort()).toEqual(["error", "request_id"])
      expect(Object.keys(err.properties).sort()).toEqual(["error", "request_id"])
    }))

  it.effect("no HttpApiDecodeError, no dangling $ref, no operator paths", () =>
    Effect.gen(function*() {
      const doc = yield* fetchDoc
      const text = JSON.stringify(doc)
      expect(text).not.toContain("HttpApiDecodeError")
      const refs = new Set([...text.matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]!))
      for (const ref of refs) expect(doc.components.schemas, ref).toHaveProperty([ref])
      for (const path of Object.keys(doc.paths)) expect(path.startsWith("/operator")).toBe(false)
      expect(text).not.toContain("/operator/")
      expect(text).not.toContain("OperatorToken")
      const ids = operations(doc).map((o) => o.op.operationId)
      for (const hidden of ["submitPilotApplication", "approvePilotApplication", "operatorCreateApiKey"]) {
        expect(ids).not.toContain(hidden)
      }
      expect(new Set(ids).size).toBe(ids.length)
    }))

  it.effect("/docs is an HTML page; /healthz and /readyz answer 200 {status:\"ok\"} without a key", () =>
    Effect.gen(function*() {
      const docs = yield* request("GET", "/docs")
      expect(docs.status).toBe(200)
      expect(docs.headers.get("content-type")).toMatch(/^text\/html/)
      expect(docs.text.toLowerCase()).toContain("<html")
      // bearer authentication with the service key scheme preselected (issue 15)
      const configuration = docs.text.match(/dataset\.configuration = JSON\.stringify\((\{.*?\})\)/s)?.[1]
      expect(JSON.parse(configuration!).authentication).toEqual({ preferredSecurityScheme: "ServiceKey" })
      expectCommonHeaders(docs)
      for (const path of ["/healthz", "/readyz"]) {
        const res = yield* request("GET", path)
        expect(res.status, path).toBe(200)
        expect(res.body).toEqual({ status: "ok" })
        expectCommonHeaders(res)
      }
    }))
})
