/**
 * The purge worker's failure path: a failing purge is rolled back whole, recorded, retried with
 * backoff and does not block the jobs behind it. Also: the key that deleted a user can follow the
 * job's Location without any scope beyond users:write. Deleting an environment purges its
 * workspace memory (D14), and its schedules with their firings (D15).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { Deletions } from "../src/Platform/Deletions.js"
import { makeTestApp } from "./support/App.js"
import { createKey, provisionSandbox, request, setSettings } from "./support/Client.js"
import { expectSingle } from "./support/Envelopes.js"
import { agentFixture, scriptedProfile } from "./support/Sandboxes.js"
import { advanceUntil, eventually } from "./support/Waiting.js"

describe("deletion jobs", () => {
  it.effect("a failing purge is rolled back, retried with backoff, and does not block other jobs", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.now())
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const sb = yield* provisionSandbox(["users:read", "users:write"])
        const mk = (external_id: string) =>
          Effect.map(request("POST", `${sb.P}/users`, { key: sb.key, body: { external_id, display_name: external_id } }), (r) => {
            expect(r.status).toBe(201)
            return r.body.data.id as string
          })
        const stuck = yield* mk("stuck")
        const fine = yield* mk("fine")
        const delStuck = yield* request("DELETE", `${sb.P}/users/${stuck}`, { key: sb.key })
        yield* TestClock.adjust("1 second")
        const delFine = yield* request("DELETE", `${sb.P}/users/${fine}`, { key: sb.key })
        expect([delStuck.status, delFine.status]).toEqual([202, 202])

        // The stuck user's purge fails inside the database.
        yield* sql.unsafe(`
          CREATE FUNCTION refuse_purge() RETURNS trigger AS $$
          BEGIN RAISE EXCEPTION 'purge refused for test'; END $$ LANGUAGE plpgsql`).pipe(Effect.orDie)
        yield* sql.unsafe(`
          CREATE TRIGGER refuse_purge BEFORE UPDATE ON users FOR EACH ROW
          WHEN (OLD.id = '${stuck}') EXECUTE FUNCTION refuse_purge()`).pipe(Effect.orDie)

        // The deleting key polls its job with users:write only (no environments:read).
        const poll = (location: string) =>
          Effect.map(request("GET", location, { key: sb.key }), (r) => {
            expect(r.status).toBe(200)
            return r.body.data
          })
        yield* TestClock.adjust("55 minutes") // nothing is due before the 1 h purge delay
        expect((yield* poll(delFine.headers.get("location")!)).state).toBe("queued")
        const fineJob = yield* advanceUntil("1 minute", poll(delFine.headers.get("location")!), (j) => j.state === "succeeded")
        expect(fineJob.state).toBe("succeeded")
        const stuckJob = yield* eventually(poll(delStuck.headers.get("location")!), (j) => j.error !== null)
        expect(stuckJob.state).toBe("running")
        expect(stuckJob.error).toContain("purge refused for test")
        const [row] = yield* sql<{ external_id: string | null }>`SELECT external_id FROM users WHERE id = ${stuck}`.pipe(Effect.orDie)
        expect(row!.external_id).toBe("stuck") // nothing half-purged

        // Once the cause is gone, the retry purges it.
        yield* sql.unsafe(`DROP TRIGGER refuse_purge ON users`).pipe(Effect.orDie)
        const retried = yield* advanceUntil("1 minute", poll(delStuck.headers.get("location")!), (j) => j.state === "succeeded")
        expect(retried.state).toBe("succeeded")
        expect(retried.error).toBeNull()
        const [after] = yield* sql<{ external_id: string | null }>`SELECT external_id FROM users WHERE id = ${stuck}`.pipe(Effect.orDie)
        expect(after!.external_id).toBeNull()
      }).pipe(Effect.provide(makeTestApp({ sweepIntervalSeconds: 60 })))
    }), 120_000)

  it.live("deleting an environment purges its workspace memory", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* provisionSandbox(["agents:write", "memory:write"])
      const ws = expectSingle(yield* request("POST", `${sb.P}/workspaces`, { key: sb.key, body: { name: "w" } }), 201)
      expectSingle(yield* request("PUT", `${sb.P}/workspaces/${ws.id}/memory/k`, { key: sb.key, body: { value: 1 } }))
      const memory = Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM workspace_memory WHERE tenant_id = ${sb.tenantId}`.pipe(Effect.orDie),
        ([row]) => row!.n
      )
      expect(yield* memory).toBe(1)
      const deleter = yield* createKey(sb.tenantId, ["environments:write"], "deleter")
      expect((yield* request("DELETE", sb.P, { key: deleter.secret })).status).toBe(202)
      yield* (yield* Deletions).runDue // (or the worker's own pass, already under way)
      expect(yield* eventually(memory, (n) => n === 0)).toBe(0)
    }).pipe(Effect.provide(makeTestApp({ purgeDelaySeconds: 0 }))), 60_000)

  it.live("deleting an environment purges its schedules and their firings", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const sb = yield* provisionSandbox(["agents:write", "schedules:write", "runs:write"])
      yield* setSettings(sb.tenantId, { schedule_min_interval_seconds: 1 })
      const { rev, ws } = yield* agentFixture(sb.P, sb.key, {
        profile: scriptedProfile([{ type: "text", text: "ok" }]),
        instructions: "",
        tool_ids: []
      })
      const body = { workspace_id: ws.id, agent_revision_id: rev.id, cron: "* * * * * *", input: [{ type: "text", text: "hi" }] }
      expectSingle(yield* request("POST", `${sb.P}/schedules`, { key: sb.key, body }), 201)
      const rows = Effect.map(
        sql<{ schedules: number; firings: number }>`
          SELECT (SELECT count(*)::int FROM schedules WHERE tenant_id = ${sb.tenantId}) AS schedules,
                 (SELECT count(*)::int FROM schedule_firings WHERE tenant_id = ${sb.tenantId}) AS firings`.pipe(Effect.orDie),
        ([row]) => row!
      )
      expect((yield* eventually(rows, (r) => r.firings > 0)).firings).toBeGreaterThan(0)
      const deleter = yield* createKey(sb.tenantId, ["environments:write"], "deleter")
      expect((yield* request("DELETE", sb.P, { key: deleter.secret })).status).toBe(202)
      yield* (yield* Deletions).runDue
      expect(yield* eventually(rows, (r) => r.schedules === 0 && r.firings === 0)).toEqual({ schedules: 0, firings: 0 })
    }).pipe(Effect.provide(makeTestApp({ purgeDelaySeconds: 0 }))), 60_000)
})
