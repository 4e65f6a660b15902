/**
 * Workspace memory in runs (D14): a revision made with `memory: true` is offered the built-in tools
 * `memory_get` and `memory_put`; a scripted run calls them as reads (no approval), each with its
 * started/completed events and a `tool_call` usage record, the write stored with `updated_by` the
 * run and shared across the workspace's conversations. Bad input is a tool error the run goes on
 * after, and so is a `memory_put` past the `storage_bytes` quota (D20). Revisions: `memory`
 * defaults to false, counts in the content hash only when true, and a revision with memory cannot
 * add a tool named like a built-in (400 `tool_name_reserved`).
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { defaultToolConfig } from "../src/Config/AppConfig.js"
import { makeTestApp } from "./support/App.js"
import { operator, request } from "./support/Client.js"
import { expectError, expectSingle } from "./support/Envelopes.js"
import { isTerminal, RUN_SCOPES, sandboxWithKey, scriptedProfile } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { eventually } from "./support/Waiting.js"

const ALLOWED_HOST = "tools.example.com"
const SCOPES = [...RUN_SCOPES, "usage:read", "memory:read", "memory:write", "connections:read", "connections:write"]

/** A sandbox with a workspace and an agent; revisions of scripted steps, and runs of them in new conversations. */
const memoryAgent = Effect.gen(function*() {
  const sb = yield* sandboxWithKey(SCOPES, "memory")
  const key = sb.manager
  const post = (suffix: string, body: unknown) => request("POST", `${sb.P}${suffix}`, { key, body })
  const ws = expectSingle(yield* post("/workspaces", { name: "Support" }), 201)
  const agent = expectSingle(yield* post("/agents", { workspace_id: ws.id, name: "Helper" }), 201)
  const revision = (steps: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) =>
    Effect.gen(function*() {
      const mp = expectSingle(yield* post("/model-profiles", scriptedProfile(steps)), 201)
      return yield* post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "Remember.", tool_ids: [], ...extra })
    })
  /** A run of the revision in a new conversation, once it ended, with its events. */
  const run = (revisionId: string) =>
    Effect.gen(function*() {
      const conv = expectSingle(yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: revisionId }), 201)
      const started = expectSingle(yield* post(`/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "hi" }] }), 202)
      const ended = yield* eventually(
        Effect.map(request("GET", `${sb.P}/runs/${started.id}`, { key }), (r) => expectSingle(r)),
        (r) => isTerminal(r.status),
        200
      )
      const events = (yield* request("GET", `${sb.P}/runs/${started.id}/events?limit=100`, { key })).body.items as Array<any>
      return { run: ended, events }
    })
  const item = (k: string) => request("GET", `${sb.P}/workspaces/${ws.id}/memory/${k}`, { key })
  return { ...sb, key, post, ws, agent, revision, run, item }
})

const toolEvents = (events: ReadonlyArray<any>) =>
  events.filter((e) => e.type.startsWith("run.tool_call.")).map((e) => [e.type, e.data.name])

layer(
  makeTestApp({ tools: { ...defaultToolConfig, reconcileRetrySeconds: 86_400, destinationAllowlist: ALLOWED_HOST } }),
  { excludeTestServices: true, timeout: "60 seconds" }
)("memory tools in runs (D14)", (it) => {
  it.effect("a scripted run puts then gets a value: events, the stored item, usage records; shared across conversations", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const s = yield* memoryAgent
      const value = { tone: "formal", since: 2024 }
      const rev = expectSingle(
        yield* s.revision([
          { type: "tool_call", tool: "memory_put", input: { key: "customer:42.tone", value } },
          { type: "tool_call", tool: "memory_get", input: { key: "customer:42.tone" } },
          { type: "text", text: "Noted." }
        ], { memory: true }),
        201
      )
      expect(rev.memory).toBe(true)
      const { events, run } = yield* s.run(rev.id)
      expect(run.status).toBe("succeeded")
      expect(run.output).toEqual([{ type: "text", text: "Noted." }])
      expect(toolEvents(events)).toEqual([
        ["run.tool_call.started", "memory_put"],
        ["run.tool_call.completed", "memory_put"],
        ["run.tool_call.started", "memory_get"],
        ["run.tool_call.completed", "memory_get"]
      ])
      const byType = (type: string, name: string) => events.find((e) => e.type === type && e.data.name === name)!.data
      expect(byType("run.tool_call.started", "memory_put")).toMatchObject({
        tool_id: "memory_put",
        effect: "read",
        input: { key: "customer:42.tone", value }
      })
      expect(byType("run.tool_call.completed", "memory_put").output).toEqual({ key: "customer:42.tone", version: 1 })
      expect(byType("run.tool_call.completed", "memory_get").output).toEqual({ key: "customer:42.tone", value, version: 1 })
      // no approval, and the answer follows the tool calls
      expect(events.some((e) => e.type === "run.requires_action")).toBe(false)
      const last = events.findLastIndex((e) => e.type === "run.tool_call.completed")
      expect(events.findIndex((e) => e.type === "run.message" && e.data.content?.[0]?.text === "Noted.")).toBeGreaterThan(last)

      const stored = expectSingle(yield* s.item("customer:42.tone"))
      expect(stored).toMatchObject({ value, version: 1, updated_by: { type: "run", id: run.id } })

      // two tool_call usage records, in the steps' transactions, named by the built-ins
      const records = yield* sql<{ tool_id: string; agent_revision_id: string }>`
        SELECT tool_id, agent_revision_id FROM usage_records WHERE run_id = ${run.id} AND kind = 'tool_call' ORDER BY id`
        .pipe(Effect.orDie)
      expect(records.map((r) => r.tool_id)).toEqual(["memory_put", "memory_get"])
      expect(records.every((r) => r.agent_revision_id === rev.id)).toBe(true)
      expect(run.usage.tool_calls).toBe(2)
      const usage = expectSingle(yield* request("GET", `${s.P}/usage`, { key: s.key }))
      expect(usage.totals.tool_calls).toBe(2)

      // another conversation of the workspace sees (and replaces) the same item
      const second = yield* s.run(rev.id)
      expect(second.run.status).toBe("succeeded")
      expect(byTypeOf(second.events, "memory_get").output).toEqual({ key: "customer:42.tone", value, version: 2 })
      expect(expectSingle(yield* s.item("customer:42.tone")).updated_by).toEqual({ type: "run", id: second.run.id })
    }))

  it.effect("memory_put's write and its answer commit together: a failed answer leaves no write, the retry writes once", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const s = yield* memoryAgent
      // the first answer of a memory_put fails in the database (a sequence is not rolled back with it)
      yield* sql.unsafe(`
        CREATE SEQUENCE memory_answer_attempts;
        CREATE FUNCTION fail_first_memory_answer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.type = 'run.tool_call.completed' AND NEW.data->>'name' = 'memory_put'
             AND nextval('memory_answer_attempts') = 1 THEN
            RAISE EXCEPTION 'the answer is lost';
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER fail_first_memory_answer BEFORE INSERT ON run_events
        FOR EACH ROW EXECUTE FUNCTION fail_first_memory_answer();`).pipe(Effect.orDie)
      const rev = expectSingle(
        yield* s.revision([
          { type: "tool_call", tool: "memory_put", input: { key: "once", value: "v" } },
          { type: "text", text: "Done." }
        ], { memory: true }),
        201
      )
      const { events, run } = yield* s.run(rev.id).pipe(
        Effect.ensuring(Effect.orDie(sql.unsafe(`DROP TRIGGER fail_first_memory_answer ON run_events`)))
      )
      expect(run.status).toBe("succeeded")
      // the actor restarted and called it again: the lost attempt wrote nothing
      expect(events.filter((e) => e.type === "run.tool_call.started")).toHaveLength(2)
      expect(events.filter((e) => e.type === "run.tool_call.completed").map((e) => e.data.output)).toEqual([
        { key: "once", version: 1 }
      ])
      expect(expectSingle(yield* s.item("once"))).toMatchObject({ value: "v", version: 1 })
      const [{ n }] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM usage_records WHERE run_id = ${run.id} AND kind = 'tool_call'`.pipe(Effect.orDie)
      expect(n).toBe(1)
    }))

  it.effect("bad input is a tool error the run goes on after; a missing key is an answer; without memory no tools", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const s = yield* memoryAgent
      const rev = expectSingle(
        yield* s.revision([
          { type: "tool_call", tool: "memory_put", input: { key: "a/b", value: 1 } },
          { type: "tool_call", tool: "memory_get", input: { key: ".." } },
          { type: "tool_call", tool: "memory_put", input: { key: "big", value: "x".repeat(64 * 1024 - 1) } },
          { type: "tool_call", tool: "memory_get", input: { key: "never-written" } },
          { type: "text", text: "Done." }
        ], { memory: true }),
        201
      )
      const { events, run } = yield* s.run(rev.id)
      expect(run.status).toBe("succeeded")
      const failed = events.filter((e) => e.type === "run.tool_call.failed").map((e) => e.data.error.type)
      expect(failed).toEqual(["invalid_input", "invalid_input", "value_too_large"])
      expect(byTypeOf(events, "memory_get").output).toEqual({ key: "never-written", found: false })
      expectError(yield* s.item("big"), 404, "not_found", "resource_missing", "key")
      const [{ n }] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM usage_records WHERE run_id = ${run.id} AND kind = 'tool_call'`.pipe(Effect.orDie)
      expect(n).toBe(4)

      // a revision without memory is not offered the tools: the scripted model cannot call them
      const plain = expectSingle(yield* s.revision([{ type: "tool_call", tool: "memory_get", input: { key: "k" } }]), 201)
      expect(plain.memory).toBe(false)
      const refused = yield* s.run(plain.id)
      expect(refused.run.status).toBe("failed")
      expect(toolEvents(refused.events)).toEqual([])
    }))

  it.effect("memory_put past the storage_bytes quota (D20) is a tool error quota_exceeded: nothing stored, the run goes on", () =>
    Effect.gen(function*() {
      const s = yield* memoryAgent
      expect((yield* operator("PUT", `/tenants/${s.tenantId}/environments/sandbox/quotas/storage_bytes`, { limit: 20 })).status).toBe(200)
      const rev = expectSingle(
        yield* s.revision([
          { type: "tool_call", tool: "memory_put", input: { key: "small", value: "x".repeat(8) } }, // 10 bytes
          { type: "tool_call", tool: "memory_put", input: { key: "large", value: "y".repeat(9) } }, // 11 bytes: 21 > 20
          { type: "text", text: "Done." }
        ], { memory: true }),
        201
      )
      const { events, run } = yield* s.run(rev.id)
      expect(run.status).toBe("succeeded")
      expect(toolEvents(events)).toEqual([
        ["run.tool_call.started", "memory_put"],
        ["run.tool_call.completed", "memory_put"],
        ["run.tool_call.started", "memory_put"],
        ["run.tool_call.failed", "memory_put"]
      ])
      const failed = events.find((e) => e.type === "run.tool_call.failed")!.data.error
      expect(failed.type).toBe("quota_exceeded")
      expect(failed.message).toContain("storage_bytes")
      expectError(yield* s.item("large"), 404, "not_found", "resource_missing", "key")
      expect(expectSingle(yield* s.item("small")).value).toBe("x".repeat(8))
      const quotas = (yield* request("GET", `${s.P}/quotas`, { key: s.key })).body.items
      expect(quotas.find((q: any) => q.name === "storage_bytes")).toMatchObject({ used: 10, limit: 20 })
    }))

  it.effect("revisions: memory in the content hash only when true; a tool named like a built-in is refused with memory", () =>
    Effect.gen(function*() {
      const s = yield* memoryAgent
      const steps = [{ type: "text", text: "ok" }]
      const plain = expectSingle(yield* s.revision(steps), 201)
      const hash = (content: Record<string, unknown>) => {
        const sorted = Object.fromEntries(Object.entries(content).sort(([a], [b]) => (a < b ? -1 : 1)))
        return createHash("sha256").update(JSON.stringify(sorted)).digest("hex")
      }
      const base = { instructions: "Remember.", model_profile_id: plain.model_profile_id, tool_ids: [] }
      expect(plain.content_hash).toBe(hash(base))
      const withMemory = expectSingle(
        yield* s.post(`/agents/${s.agent.id}/revisions`, { ...base, memory: true }),
        201
      )
      expect(withMemory.content_hash).toBe(hash({ ...base, memory: true }))
      expect(expectSingle(yield* s.post(`/agents/${s.agent.id}/revisions`, { ...base, memory: false }), 201).content_hash)
        .toBe(plain.content_hash)

      // a reviewed tool named memory_get: fine without memory, refused with it
      const body = connectionBody(`https://${ALLOWED_HOST}`)
      const connection = expectSingle(
        yield* s.post("/connections", { ...body, operations: [{ ...body.operations[0], name: "memory_get" }] }),
        201
      )
      expect((yield* operator("POST", `/connections/${connection.id}/review`, { decision: "approve" })).status).toBe(200)
      const tools = (yield* request("GET", `${s.P}/tools?connection_id=${connection.id}`, { key: s.key })).body.items as Array<any>
      const toolIds = tools.map((t) => t.id)
      expectSingle(yield* s.post(`/agents/${s.agent.id}/revisions`, { ...base, tool_ids: toolIds }), 201)
      expectError(
        yield* s.post(`/agents/${s.agent.id}/revisions`, { ...base, tool_ids: toolIds, memory: true }),
        400,
        "invalid_request",
        "tool_name_reserved",
        "tool_ids.0"
      )
    }))
})

const byTypeOf = (events: ReadonlyArray<any>, name: string) =>
  events.find((e) => e.type === "run.tool_call.completed" && e.data.name === name)!.data
