/**
 * The served OpenAPI document as third-party tools read it (issue 15): Redocly CLI's recommended
 * ruleset (`redocly.yaml`) finds 0 errors; openapi-typescript's types compile and type a client; every operation has a summary and every tag a
 * description; `servers` names PUBLIC_BASE_URL; no title or description Effect Schema generates for
 * refinements (`maxLength(128)`, "a string at most 128 character(s) long") is left.
 */
import { OpenApi } from "@effect/platform"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Api } from "../src/Api.js"
import { makeTestApp } from "./support/App.js"
import { provisionSandbox, request } from "./support/Client.js"

const ROOT = path.resolve(import.meta.dirname, "..")
const REDOCLY = path.join(ROOT, "node_modules", "@redocly", "cli", "bin", "cli.js")
const OPENAPI_TS = path.join(ROOT, "node_modules", "openapi-typescript", "bin", "cli.js")
const TSC = path.join(ROOT, "node_modules", "typescript", "bin", "tsc")
const PUBLIC_BASE_URL = "https://agents.acme.test"

const GENERATED_TITLE = /^(maxLength|minLength|pattern|between|greaterThan|lessThan|int|nonEmpty)/
const GENERATED_DESCRIPTION = /character\(s\) long|a string at (most|least)/

/** `node <args>` in `dir`: its exit code and output. */
const node = (dir: string, args: ReadonlyArray<string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(
      process.execPath,
      args,
      {
        cwd: dir,
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" }
      },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr })
    )
  )

/** `f` on the document written to `openapi.json` in a temporary directory. */
const withDocument = <A>(doc: unknown, f: (dir: string, file: string) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "openapi-lint-"))),
    (dir) =>
      Effect.promise(() => {
        const file = path.join(dir, "openapi.json")
        fs.writeFileSync(file, JSON.stringify(doc))
        return f(dir, file)
      }),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** `redocly lint --format=json` on the document. */
const lint = (doc: unknown) =>
  withDocument(doc, (dir, file) => node(dir, [REDOCLY, "lint", file, "--config", path.join(ROOT, "redocly.yaml"), "--format=json"]))

/**
 * A customer's typed client: openapi-typescript generates the document's types, and a module
 * that uses them (a run's request and answer) type-checks with strict TypeScript.
 */
const USES_TYPES = `import type { components, paths } from "./api.js"
type CreateRun = paths["/v1/tenants/{tenant_id}/environments/{environment}/conversations/{conversation_id}/runs"]["post"]
export const body: NonNullable<CreateRun["requestBody"]>["content"]["application/json"] = {
  input: [{ type: "text", text: "hello" }]
}
type Accepted = CreateRun["responses"]["202"]["content"]["application/json"]
export const status = (r: Accepted): string => r.data.status
export const code = (e: components["schemas"]["InvalidRequestError"]): string => e.error.code
// @ts-expect-error a run's input is a list of content items, not a string
export const wrong: NonNullable<CreateRun["requestBody"]>["content"]["application/json"] = { input: "hello" }
`

const generateAndCompile = (doc: unknown) =>
  withDocument(doc, async (dir, file) => {
    const generated = await node(dir, [OPENAPI_TS, file, "--output", path.join(dir, "api.d.ts")])
    if (generated.code !== 0) return { step: "openapi-typescript", ...generated }
    fs.writeFileSync(path.join(dir, "uses.ts"), USES_TYPES)
    const compiled = await node(dir, [
      TSC,
      "--noEmit",
      "--strict",
      "--exactOptionalPropertyTypes",
      "--module",
      "nodenext",
      "--moduleResolution",
      "nodenext",
      "--target",
      "es2022",
      "--skipLibCheck",
      "false",
      "uses.ts",
      "api.d.ts"
    ])
    return { step: "tsc", lines: fs.readFileSync(path.join(dir, "api.d.ts"), "utf8").split("\n").length, ...compiled }
  })

const operations = (doc: any) =>
  Object.entries<any>(doc.paths).flatMap(([path, item]) =>
    Object.entries<any>(item)
      .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
      .map(([method, op]) => ({ label: `${method} ${path}`, op }))
  )

/** Every `title` and `description` string in the document, with where it is. */
const texts = (node: unknown, at = "#"): Array<{ at: string; key: "title" | "description"; value: string }> => {
  if (node === null || typeof node !== "object") return []
  const own = (["title", "description"] as const)
    .filter((key) => typeof (node as any)[key] === "string")
    .map((key) => ({ at, key, value: (node as any)[key] as string }))
  return [...own, ...Object.entries(node).flatMap(([k, v]) => texts(v, `${at}/${k}`))]
}

layer(makeTestApp({ publicBaseUrl: Option.some(`${PUBLIC_BASE_URL}/`) }), { excludeTestServices: true })(
  "OpenAPI document: lint-clean and readable (issue 15)",
  (it) => {
    const fetchDoc = Effect.map(request("GET", "/v1/openapi.json"), (res) => {
      expect(res.status).toBe(200)
      return res.body as any
    })

    it.effect("Redocly CLI, recommended ruleset: 0 errors on the served document", () =>
      Effect.gen(function*() {
        const doc = yield* fetchDoc
        const { code, stderr, stdout } = yield* lint(doc)
        const report = JSON.parse(stdout.slice(stdout.indexOf("{")))
        const problems = report.problems.map((p: any) => `${p.severity} ${p.ruleId}: ${p.message}`)
        expect(report.totals.errors, problems.join("\n") || stderr).toBe(0)
        expect(code, stderr).toBe(0)
      }), 30_000)

    it.effect(
      "openapi-typescript generates types that compile, and a client written against them type-checks",
      () =>
        Effect.gen(function*() {
          const result = yield* generateAndCompile(yield* fetchDoc)
          expect(result.step, result.stderr).toBe("tsc")
          expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0)
          expect((result as { lines: number }).lines).toBeGreaterThan(1000)
        }),
      60_000
    )

    it.effect("servers: PUBLIC_BASE_URL (without a trailing slash); info has a license", () =>
      Effect.gen(function*() {
        const doc = yield* fetchDoc
        expect(doc.servers).toEqual([{ url: PUBLIC_BASE_URL, description: "This service" }])
        expect(doc.info.license).toEqual({ name: "Proprietary", identifier: "LicenseRef-Proprietary" })
      }))

    it.effect("every operation has a summary and its operationId; every tag a description", () =>
      Effect.gen(function*() {
        const doc = yield* fetchDoc
        const ops = operations(doc)
        expect(ops.length).toBeGreaterThan(50)
        for (const { label, op } of ops) {
          expect(op.summary, label).toMatch(/^[A-Z]\S*( \S+)*$/)
          expect(op.summary.length, label).toBeLessThanOrEqual(40)
          expect(op.operationId, label).toMatch(/^[a-z][A-Za-z]+$/)
        }
        expect(ops.find((o) => o.op.operationId === "createRun")?.op.summary).toBe("Create a run")
        expect(ops.find((o) => o.op.operationId === "listUser")?.op.summary).toBe("List users")
        const summaries = ops.map((o) => o.op.summary)
        expect(new Set(summaries).size).toBe(summaries.length)
        const tags = new Set<string>(doc.tags.map((t: any) => t.name))
        for (const tag of doc.tags) expect(tag.description, tag.name).toMatch(/\S{3}/)
        for (const { label, op } of ops) for (const tag of op.tags) expect(tags.has(tag), `${label} ${tag}`).toBe(true)
      }))

    it.effect("no generated titles or descriptions; the ones we wrote stay", () =>
      Effect.gen(function*() {
        const doc = yield* fetchDoc
        const all = texts(doc)
        const titles = all.filter((t) => t.key === "title" && GENERATED_TITLE.test(t.value))
        const descriptions = all.filter((t) => t.key === "description" && GENERATED_DESCRIPTION.test(t.value))
        expect(titles.slice(0, 5)).toEqual([])
        expect(descriptions.slice(0, 5)).toEqual([])
        const text = JSON.stringify(doc)
        expect(text).not.toContain("/schemas/unknown")
        expect(text).not.toMatch(/"title":"unknown"/)
        // Real descriptions survive: of a refined header, a refined schema, an operation.
        const createRun = operations(doc).find((o) => o.op.operationId === "createRun")!.op
        const idem = createRun.parameters.find((p: any) => p.name === "Idempotency-Key")
        expect(idem.description).toContain("0x21-0x7E")
        // ... and the Idempotency-Key's character rule (Idempotency `validKey`) is in its schema.
        expect(idem.schema).toMatchObject({ minLength: 1, maxLength: 255, pattern: "^[\\x21-\\x7E]+$" })
        expect(createRun.description).toContain("Admits a run")
        expect(doc.components.schemas.InvalidRequestError.title).toBe("Error (400)")
      }))

    it.effect("rules the server enforces on a whole body are in the schema, and an empty cursor is no cursor", () =>
      Effect.gen(function*() {
        const doc = yield* fetchDoc
        const schemas = doc.components.schemas
        // PATCH user/actor: at least one field (400 parameter_missing otherwise)
        for (const name of ["updateUser", "updateServiceActor"]) {
          const op = operations(doc).find((o) => o.op.operationId === name)?.op
          if (op) expect(op.requestBody.content["application/json"].schema.minProperties, name).toBe(1)
        }
        expect(operations(doc).some((o) => o.op.operationId === "updateUser")).toBe(true)
        // the identity provider: exactly one of jwks and jwks_url (400 parameter_invalid otherwise)
        expect(schemas.IdentityProvider.allOf).toEqual([{ oneOf: [{ required: ["jwks"] }, { required: ["jwks_url"] }] }])
        expect(schemas.IdentityProvider.properties.jwks_url.format).toBe("uri")
        // `cursor=` is what the document allows (a string): the first page, not 400 invalid_cursor
        const sb = yield* provisionSandbox(["users:read"])
        const first = yield* request("GET", `${sb.P}/users?cursor=`, { key: sb.key })
        expect(first.status, first.text).toBe(200)
        expect(first.body.items).toEqual([])
      }))
  }
)

describe("OpenAPI document without PUBLIC_BASE_URL", () => {
  it("names the serving origin as its server (a relative URL), as /docs reads it", () => {
    const doc: any = OpenApi.fromApi(Api)
    expect(doc.servers).toEqual([{ url: "/", description: "This service" }])
  })
})
