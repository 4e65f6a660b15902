/**
 * A hung node under load (issue 41): three nodes on one database, six cells (three with a tool
 * server whose refund a user approves), runs created on every cell through the nodes; the node whose
 * runner owns the most cells is stopped with SIGSTOP for 15 s, its database sessions open (the
 * process keeps its sockets, it just stops answering), for 25 s, then resumed with SIGCONT.
 *
 *   1. Its cells answer from another node within 10 s of the stop (its shard leases expire after
 *      CLUSTER_LOCK_EXPIRATION_SECONDS, 6 s, whatever its sessions do).
 *   2. Every request is answered before the stopped node resumes: its calls to cells give up
 *      within CLUSTER_SEND_TIMEOUT_SECONDS (10 s) of its start (what is left of it, at least 1 s),
 *      even after it waited for a database connection or a row lock behind the stopped node's open
 *      transaction (Postgres ends that session after the lease expiration, 6 s). A request routed
 *      to the hung owner gets its 503 then, not when the owner resumes: within 12 s of its start
 *      (the send timeout, the least second, and a second for the loaded machine).
 *   3. Right after SIGCONT, requests for its old cells sent to the resumed node itself are answered
 *      503 `cell_unavailable` or by the cells' new owners (never by its stale cells); it rejoins the
 *      cluster (healthy again).
 *   4. The books: every admitted run ends `succeeded`, none is unknown (0 duplicated), each approved
 *      write ran once at its tool server (0 lost, 0 duplicated), and no run has a second terminal
 *      event or decision (0 stale commits: the resumed node's commits are fenced by the generation).
 *
 * One line of figures is logged.
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { clusterClient, clusterView, emptyTally, isCellUnavailable, send } from "./support/Cluster.js"
import {
  books,
  busiestRunner,
  clusterEnv,
  debugDump,
  driveLoad,
  provisionLoadCells,
  startNodes,
  timeToAnswer
} from "./support/ClusterLoad.js"
import { childDatabase } from "./support/Database.js"
import { type ChildServer, killAllChildren } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"

afterEach(killAllChildren)

const STOP_MS = 25_000
/** the nodes' CLUSTER_SEND_TIMEOUT_SECONDS, in ms */
const SEND_TIMEOUT_MS = 10_000
/** the probe of a moved cell gives up on a request after this and sends another */
const PROBE_GIVE_UP_MS = 2000

describe("cluster of three nodes", () => {
  it.live(
    "SIGSTOP of the busiest node for 25 s: its cells answer elsewhere within 10 s, every request within the send timeout, nothing lost, duplicated or stale after SIGCONT",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const { db, sql } = yield* childDatabase
        const { addresses, nodeOf, nodes } = yield* startNodes(
          db.url,
          clusterEnv({ CLUSTER_SEND_TIMEOUT_SECONDS: String(SEND_TIMEOUT_MS / 1000) }),
          3
        )
        let live: ReadonlyArray<ChildServer> = nodes
        const tally = emptyTally()
        yield* debugDump(() => nodes, tally)
        const client = clusterClient(() => live, tally)
        let jwksFrom: ChildServer = nodes[0]!
        const { cells, hosts } = yield* provisionLoadCells(client, 3, 3, () => jwksFrom)

        const load = yield* driveLoad(client, cells, sql)
        yield* realSleep(5000)
        const { moving, perRunner, tenantOf, victimAddress } = yield* busiestRunner(nodes[0]!, cells, addresses)
        const victim = nodeOf.get(victimAddress)!
        const survivors = nodes.filter((n) => n !== victim)
        jwksFrom = survivors[0]!
        yield* realSleep(2000) // verifications that fetch the key set from the victim finish first

        // ---- the stop: its cells answer again through the others --------------------------------------
        const stoppedAt = Date.now()
        victim.signal("SIGSTOP")
        live = survivors
        const movingCells = moving.map((c) => tenantOf.get(c.tenant_id)!)
        const probeLast = new Map<string, string>()
        const moveTimes = yield* Effect.forEach(movingCells, (c) =>
          timeToAnswer(c, survivors, stoppedAt, tally, probeLast, PROBE_GIVE_UP_MS), {
          concurrency: "unbounded"
        })
        yield* realSleep(Math.max(0, stoppedAt + STOP_MS - Date.now()))

        // ---- SIGCONT: the resumed node is asked for its old cells at once -----------------------------
        victim.signal("SIGCONT")
        const resumedAt = Date.now()
        const onResumed = yield* Effect.forEach(
          movingCells.flatMap((c) => [c, c]),
          (c) =>
            send(victim.baseUrl, "GET", `${c.P}/workspaces/${c.workspaceId}`, c.key),
          { concurrency: "unbounded" }
        )
        const resumedAnswers = onResumed.map((a) =>
          `${a.status}${isCellUnavailable(a) ? " cell_unavailable" : ""}`
        )
        live = nodes
        let rejoined = -1
        while (rejoined < 0 && Date.now() - resumedAt < 30_000) {
          const view = yield* clusterView(survivors[0]!)
          if (view.runners.some((r) => r.address === victimAddress && r.healthy)) rejoined = Date.now() - resumedAt
          else yield* realSleep(250)
        }
        yield* realSleep(4000) // runs go on over all three nodes
        yield* load.stop
        const b = yield* books(sql, cells, hosts, load.admitted)
        yield* load.stopApproving

        // a second terminal event or decision of a run: a commit of a stale owner
        const twice = b.runs.length === 0 ? [] : yield* Effect.orDie(sql<{ run_id: string; type: string; n: number }>`
          SELECT run_id, type, count(*)::int AS n FROM run_events
          WHERE run_id IN ${sql.in(b.runs.map((r) => r.id))}
            AND type IN ('run.succeeded', 'run.failed', 'run.cancelled', 'run.expired', 'run.interrupted', 'run.outcome_unknown', 'run.approval.decided')
          GROUP BY run_id, type HAVING count(*) > 1`)
        const during = tally.trace.filter((t) => t.at > stoppedAt && t.at <= resumedAt)
        // requests sent after the stop to the other nodes (those sent to the stopped node, just
        // before the clients turned away from it, could only be answered when it resumed)
        const slowest = Math.max(0, ...tally.trace.filter((t) => t.at - t.ms > stoppedAt && t.base !== victim.baseUrl).map((t) => t.ms))
        const fenced = (victim.output().match(/was fenced off/g) ?? []).length
        console.log(
          `cluster hung: cells_per_runner=${JSON.stringify([...perRunner.values()])} cells_moved=${moving.length} ` +
            `move_ms_each=${JSON.stringify(moveTimes)} requests_while_stopped=${during.length} ` +
            `refused_503_while_stopped=${during.filter((t) => t.status === 503).length} slowest_request_ms=${slowest} ` +
            `resumed_node_answers=${JSON.stringify(resumedAnswers)} rejoined_ms=${rejoined} runs_admitted=${load.admitted.size} ` +
            `runs_in_db=${b.runs.length} writes=${b.writesDone} write_requests=${b.writeRequests} duplicate_writes=${b.duplicates} ` +
            `writes_not_applied=${b.notApplied.size} reconciliation_requests=${b.reconciliations} fenced_commits_on_resumed=${fenced} ` +
            `drain_ms=${b.drainMs}`
        )

        const logs = [...survivors, victim].map((n) => `---- ${n.baseUrl}\n${n.output().slice(-2500)}`).join("\n")
        expect(moving.length, "cells on the stopped runner").toBeGreaterThanOrEqual(2)
        expect(
          moveTimes.every((ms) => ms >= 0 && ms <= 10_000),
          `moved within 10 s: ${JSON.stringify(moveTimes)} ${JSON.stringify([...probeLast])}\n${logs}`
        )
          .toBe(true)
        // Within the send timeout (10 s), or the least second a routed call gets after a request
        // waited; a second more for the busy machine. (Before its deadline had a timer of its own,
        // Effect.timeout's answers came 15-19.8 s in on a busy machine, issue 41.)
        expect(slowest, "every request answered within the send timeout").toBeLessThanOrEqual(SEND_TIMEOUT_MS + 2000)
        expect(
          resumedAnswers.filter((s) => s !== "200" && s !== "503 cell_unavailable"),
          `the resumed node's answers: ${onResumed.filter((a) => a.status !== 200).map((a) => a.text.slice(0, 300)).join(" | ")}\n${logs}`
        ).toEqual([])
        expect(rejoined, "the resumed node is a healthy runner again").toBeGreaterThanOrEqual(0)
        expect(b.lost, "admitted runs missing from the database").toEqual([])
        expect(b.unended.map((r) => `${r.id}:${r.status}`), logs).toEqual([])
        expect(b.notSucceeded.map((r) => `${r.id}:${r.status}`), logs).toEqual([])
        expect(b.unknownRuns.map((r) => r.id), "runs no client was told of (a retry made a second one)").toEqual([])
        expect(b.toolRuns.length).toBeGreaterThan(0)
        expect({ duplicates: b.duplicates, problems: b.writeProblems }).toEqual({ duplicates: 0, problems: [] })
        expect(twice, "events a stale owner committed twice").toEqual([])
        expect(load.refusals, "refused run creations").toEqual([])
        expect(load.decisions.failed, "approvals that could not be decided").toEqual([])
        expect(tally.unexpected, "5xx other than 503 cell_unavailable").toEqual([])
        expect(tally.badRetryAfter, "503 without Retry-After: 2").toBe(0)
      })),
    180_000
  )
})
