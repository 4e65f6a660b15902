/**
 * Usage records and usage (D16) over real HTTP on a fresh database. Scripted runs with known token
 * counts (the scripted model counts words): one record per model call and per memory tool call,
 * listed by `GET P/records` newest first; their sums equal `GET P/usage` per day, agent revision
 * and model profile, and each run's own usage; the default window (the last 24 h, on TestClock),
 * filters and D6 cursors (bound to the filters, keeping the first page's window). Records are
 * written in the transaction of their step (a failed commit leaves none) and are immutable: the
 * database refuses UPDATE, DELETE and TRUNCATE outside the purge, and the purge deletes them.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import { defaultWebhookConfig } from "../src/Config/AppConfig.js"
import { Deletions } from "../src/Platform/Deletions.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectErrorCode, expectList, expectSingle } from "./support/Envelopes.js"
import { isTerminal, RUN_SCOPES, sandboxWithKey, scriptedProfile } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

const SCOPES = [...RUN_SCOPES, "usage:read", "memory:read", "memory:write", "environments:write"]
const iso = (ms: number) => new Date(ms).toISOString()
/** Background loops that wake rarely: TestClock jumps a day at a time with few wake-ups on the way. */
const QUIET = {
  sweepIntervalSeconds: 12 * 3600,
  cellIdleTimeoutSeconds: 12 * 3600,
  webhooks: { ...defaultWebhookConfig, pollSeconds: 86_400 },
  schedules: { pollMillis: 365 * 86_400_000 }
}

/**
 * A sandbox with a workspace, an agent and two revisions on two model profiles: `text` answers
 * "one two three" (instructions "Be brief." + input "four words go here": 6 input tokens, 3 output),
 * `memory` calls `memory_put` then answers "done".
 */
const usageSandbox = Effect.gen(function*() {
  const sb = yield* sandboxWithKey(SCOPES)
  const key = sb.manager
  const post = (suffix: string, body: unknown) => request("POST", `${sb.P}${suffix}`, { key, body })
  const get = (suffix: string, k = key) => request("GET", `${sb.P}${suffix}`, { key: k })
  const ws = expectSingle(yield* post("/workspaces", { name: "Support" }), 201)
  const agent = expectSingle(yield* post("/agents", { workspace_id: ws.id, name: "Helper" }), 201)
  const revision = (steps: ReadonlyArray<unknown>, extra: Record<string, unknown> = {}) =>
    Effect.gen(function*() {
      const mp = expectSingle(yield* post("/model-profiles", scriptedProfile(steps)), 201)
      const rev = expectSingle(
        yield* post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "Be brief.", tool_ids: [], ...extra }),
        201
      )
      return { id: rev.id as string, profile: mp.id as string }
    })
  const text = yield* revision([{ type: "text", text: "one two three" }])
  const memory = yield* revision([
    { type: "tool_call", tool: "memory_put", input: { key: "note", value: "v" } },
    { type: "text", text: "done" }
  ], { memory: true })
  /** A run of the revision in a new conversation, once it ended. */
  const run = (revisionId: string, input = "four words go here") =>
    Effect.gen(function*() {
      const conv = expectSingle(yield* post("/conversations", { workspace_id: ws.id, agent_revision_id: revisionId }), 201)
      const started = expectSingle(yield* post(`/conversations/${conv.id}/runs`, { input: [{ type: "text", text: input }] }), 202)
      const ended = yield* eventually(Effect.map(get(`/runs/${started.id}`), (r) => expectSingle(r)), (r) => isTerminal(r.status), 200)
      expect(ended.status).toBe("succeeded")
      return ended as { id: string; usage: Record<string, number> }
    })
  const records = (query = "", k = key) => Effect.map(get(`/records${query === "" ? "" : `?${query}`}`, k), expectList)
  /** Every record `GET P/records?query` lists, pages of `limit` (following cursors). */
  const allRecords = (query: string, limit: number) =>
    Effect.gen(function*() {
      const items: Array<any> = []
      let cursor: string | null = null
      do {
        const page: { items: Array<any>; next_cursor: string | null } = yield* records(
          `${query}&limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`
        )
        expect(page.items.length).toBeLessThanOrEqual(limit)
        items.push(...page.items)
        cursor = page.next_cursor
      } while (cursor !== null)
      return items
    })
  const usage = (query = "", k = key) => Effect.map(get(`/usage${query === "" ? "" : `?${query}`}`, k), (r) => expectSingle(r))
  return { ...sb, key, quickstart: sb.key, get, text, memory, run, records, allRecords, usage }
})

type Sums = { model_calls: number; tool_calls: number; input_tokens: number; output_tokens: number }
const sums = (records: ReadonlyArray<any>): Sums => ({
  model_calls: records.filter((r) => r.kind === "model_call").length,
  tool_calls: records.filter((r) => r.kind === "tool_call").length,
  input_tokens: records.reduce((n, r) => n + r.input_tokens, 0),
  output_tokens: records.reduce((n, r) => n + r.output_tokens, 0)
})
const pick = (t: Sums): Sums => ({
  model_calls: t.model_calls,
  tool_calls: t.tool_calls,
  input_tokens: t.input_tokens,
  output_tokens: t.output_tokens
})

describe("usage records (D16)", () => {
  it.effect(
    "records per model and tool call; their sums are GET usage per group; window, filters and cursors (TestClock)",
    () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(Date.now())
        yield* Effect.gen(function*() {
          const s = yield* usageSandbox
          const t0 = yield* Clock.currentTimeMillis
          const a1 = yield* s.run(s.text.id)
          const a2 = yield* s.run(s.text.id)
          const b1 = yield* s.run(s.memory.id, "hi")
          yield* TestClock.adjust("25 hours")
          const b2 = yield* s.run(s.memory.id, "hi")
          const t1 = yield* Clock.currentTimeMillis
          yield* TestClock.adjust("1 second") // `to` (now) is exclusive

          // the default window is the last 24 h: b2's three records, newest first
          const recent = yield* s.records()
          expect(recent.next_cursor).toBeNull()
          expect(recent.items.map((r) => [r.run_id, r.kind])).toEqual([
            [b2.id, "model_call"],
            [b2.id, "tool_call"],
            [b2.id, "model_call"]
          ])

          // the whole window, in pages of 3: eight records, no duplicates, newest first
          const window = `from=${iso(t0 - 60_000)}&to=${iso(t1 + 60_000)}`
          const all = yield* s.allRecords(window, 3)
          expect(all).toHaveLength(8)
          expect(new Set(all.map((r) => r.id)).size).toBe(8)
          expect(all.map((r) => r.id)).toEqual([...all.map((r) => r.id)].sort().reverse())
          expect(all.every((r) => /^rec_[0-9a-z]{26}$/.test(r.id) && r.object === "usage_record")).toBe(true)
          expect((yield* s.records(`${window}&limit=100`)).items).toEqual(all)
          // a model call of known tokens, and a memory tool call
          expect(all.find((r) => r.run_id === a1.id)).toEqual({
            id: expect.any(String),
            object: "usage_record",
            run_id: a1.id,
            kind: "model_call",
            agent_revision_id: s.text.id,
            model_profile_id: s.text.profile,
            provider: "scripted",
            model: "scripted-1",
            tool_id: null,
            input_tokens: 6,
            output_tokens: 3,
            created_at: iso(t0)
          })
          expect(all.find((r) => r.run_id === b1.id && r.kind === "tool_call")).toMatchObject({
            agent_revision_id: s.memory.id,
            model_profile_id: null,
            provider: null,
            model: null,
            tool_id: "memory_put",
            input_tokens: 0,
            output_tokens: 0
          })
          // each run's own usage is the sum of its records
          for (const run of [a1, a2, b1, b2]) {
            expect(sums(all.filter((r) => r.run_id === run.id)), run.id).toEqual(pick((yield* s.get(`/runs/${run.id}`)).body.data.usage))
          }

          // GET usage per group equals the sums of the records, bucket by bucket
          const profileOf: Record<string, string> = { [s.text.id]: s.text.profile, [s.memory.id]: s.memory.profile }
          const keyOf = {
            day: (r: any) => r.created_at.slice(0, 10),
            agent_revision: (r: any) => r.agent_revision_id,
            model_profile: (r: any) => r.model_profile_id ?? profileOf[r.agent_revision_id]
          }
          for (const [groupBy, key] of Object.entries(keyOf)) {
            const report = yield* s.usage(`${window}&group_by=${groupBy}`)
            expect(report).toMatchObject({ object: "usage", group_by: groupBy, from: iso(t0 - 60_000), to: iso(t1 + 60_000) })
            expect(pick(report.totals)).toEqual(sums(all))
            expect(report.totals.runs).toBe(4)
            const keys = [...new Set(all.map(key))].sort()
            expect(report.buckets.map((b: any) => b.key), groupBy).toEqual(keys)
            for (const b of report.buckets) expect(pick(b.totals), `${groupBy} ${b.key}`).toEqual(sums(all.filter((r) => key(r) === b.key)))
          }
          expect(sums(all)).toMatchObject({ model_calls: 6, tool_calls: 2 })
          expect(sums(all.filter((r) => r.agent_revision_id === s.text.id))).toEqual({
            model_calls: 2,
            tool_calls: 0,
            input_tokens: 12,
            output_tokens: 6
          })
          // the default window of usage: b2 only
          const today = yield* s.usage()
          expect(today.totals).toMatchObject({ runs: 1, ...sums(recent.items) })

          // filters: one run (the window applies too); a run of no record lists none
          expect((yield* s.records(`${window}&run_id=${b1.id}`)).items.map((r) => r.kind)).toEqual([
            "model_call",
            "tool_call",
            "model_call"
          ])
          expect((yield* s.records(`run_id=${b1.id}`)).items).toEqual([])
          expect((yield* s.records(`${window}&run_id=run_unknown`)).items).toEqual([])
          expect((yield* s.records(`from=${iso(t0 + 60_000)}&to=${iso(t1 - 60_000)}`)).items).toEqual([])

          // a cursor keeps its first page's window: a day later the default window is empty, the cursor's is not
          const first = yield* s.records("limit=2")
          expect(first.items.map((r) => r.id)).toEqual(recent.items.slice(0, 2).map((r) => r.id))
          yield* TestClock.adjust("24 hours")
          expect((yield* s.records()).items).toEqual([])
          const second = yield* s.records(`limit=2&cursor=${encodeURIComponent(first.next_cursor!)}`)
          expect(second).toEqual({ items: [recent.items[2]], next_cursor: null, request_id: expect.any(String) })
          // ...and is bound to the filters it was made with
          const cursor = `cursor=${encodeURIComponent(first.next_cursor!)}`
          expectErrorCode(yield* s.get(`/records?run_id=${b2.id}&${cursor}`), 400, "invalid_cursor")
          expectErrorCode(yield* s.get(`/records?${window}&${cursor}`), 400, "invalid_cursor")
          expectErrorCode(yield* s.get(`/records?cursor=garbage`), 400, "invalid_cursor")
          const reversed = yield* s.get(`/records?from=${iso(t1)}&to=${iso(t0)}`)
          expectErrorCode(reversed, 400, "parameter_invalid")
          expect(reversed.body.error.param).toBe("from")
          expectErrorCode(yield* s.get(`/records?from=yesterday`), 400)
          expectErrorCode(yield* s.get(`/records?limit=0`), 400)

          // the quickstart key sees its own workspace only; usage:read is required
          expect((yield* s.records(window, s.quickstart)).items).toEqual([])
          expect((yield* s.usage(window, s.quickstart)).totals).toMatchObject({ runs: 0, model_calls: 0, tool_calls: 0 })
          const runner = yield* createKey(s.tenantId, ["runs:read"], "runner")
          expectErrorCode(yield* s.get(`/records`, runner.secret), 403, "missing_scope")
        }).pipe(Effect.provide(makeTestApp(QUIET)))
      }),
    60_000
  )

  it.live(
    "a record commits with its step (a failed commit leaves none); records are immutable except to the purge",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const s = yield* usageSandbox
        // the first commit of a model answer fails in the database (a sequence is not rolled back with it)
        yield* sql.unsafe(`
        CREATE SEQUENCE answer_attempts;
        CREATE FUNCTION fail_first_answer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.type = 'run.message' AND nextval('answer_attempts') = 1 THEN RAISE EXCEPTION 'the answer is lost'; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER fail_first_answer BEFORE INSERT ON run_events FOR EACH ROW EXECUTE FUNCTION fail_first_answer();`)
          .pipe(Effect.orDie)
        const run = yield* s.run(s.text.id)
        const attempts = yield* sql<{ n: number }>`SELECT last_value::int AS n FROM answer_attempts`.pipe(Effect.orDie)
        expect(attempts[0]!.n).toBeGreaterThanOrEqual(2) // the model was called again after the failed commit
        const rows = yield* sql<{ id: string; kind: string; input_tokens: string }>`
        SELECT id, kind, input_tokens FROM usage_records WHERE run_id = ${run.id}`.pipe(Effect.orDie)
        expect(rows.map((r) => [r.kind, Number(r.input_tokens)])).toEqual([["model_call", 6]])
        expect(run.usage).toMatchObject({ model_calls: 1, input_tokens: 6, output_tokens: 3 })

        const id = rows[0]!.id
        const refused = (statement: string) =>
          Effect.map(
            Effect.either(sql.unsafe(statement)),
            (r) => (r._tag === "Left" ? String((r.left as any).cause?.message ?? r.left) : "done")
          )
        expect(yield* refused(`UPDATE usage_records SET input_tokens = 0 WHERE id = '${id}'`)).toMatch(/immutable \(UPDATE refused\)/)
        expect(yield* refused(`DELETE FROM usage_records WHERE id = '${id}'`)).toMatch(/immutable \(DELETE refused\)/)
        expect(yield* refused(`TRUNCATE usage_records`)).toMatch(/immutable \(TRUNCATE refused\)/)
        // the purge's flag holds for its own transaction and never allows an UPDATE
        const inPurge = (statement: string) =>
          Effect.either(
            sql.withTransaction(Effect.zipRight(sql`SELECT set_config('agent_platform.purging', 'on', true)`, sql.unsafe(statement)))
          )
        expect((yield* inPurge(`UPDATE usage_records SET input_tokens = 0 WHERE id = '${id}'`))._tag).toBe("Left")
        expect(yield* refused(`DELETE FROM usage_records WHERE id = '${id}'`)).toMatch(/DELETE refused/)
        // a record that is not one is refused too: the id prefix, a model call without its model
        expect(
          yield* refused(`INSERT INTO usage_records (id, tenant_id, environment, run_id, kind, agent_revision_id, tool_id, created_at)
                        VALUES ('usg_1', '${s.tenantId}', 'sandbox', '${run.id}', 'tool_call', '${s.text.id}', 'memory_get', now())`)
        ).toMatch(/usage_records_id_prefix/)
        expect(
          yield* refused(`INSERT INTO usage_records (id, tenant_id, environment, run_id, kind, agent_revision_id, created_at)
                        VALUES ('rec_1', '${s.tenantId}', 'sandbox', '${run.id}', 'model_call', '${s.text.id}', now())`)
        ).toMatch(/usage_records_kind_fields/)
        const listed = (yield* s.records()).items
        expect(listed.map((r) => [r.id, r.input_tokens])).toEqual([[id, 6]])

        // deleting the environment purges them
        expect((yield* request("DELETE", s.P, { key: s.key })).status).toBe(202)
        yield* (yield* Deletions).runDue
        const left = Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM usage_records WHERE tenant_id = ${s.tenantId}`.pipe(Effect.orDie),
          ([r]) => r!.n
        )
        expect(yield* eventually(left, (n) => n === 0)).toBe(0)
      }).pipe(Effect.provide(makeTestApp({ purgeDelaySeconds: 0 }))),
    60_000
  )
})
