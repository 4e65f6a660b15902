/**
 * The load and the books of the three-node fault tests (issue 19's kill -9, issue 41's SIGSTOP):
 * customers' cells set up over HTTP (some with a tool server whose refund needs a user's
 * approval), runs created on every cell round robin over the live nodes while a user approves
 * every write as soon as it is asked for, the time each cell of a faulty node takes to answer
 * again elsewhere, and afterwards the books: every admitted run ended, none unknown, each approved
 * write executed once at its tool server.
 */
import type { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { OPERATOR_TOKEN } from "./App.js"
import {
  type CellSetup,
  type ClusterClient,
  type ClusterView,
  clusterView,
  provisionCell,
  readyRunner,
  send,
  type Tally,
  tallyAnswer
} from "./Cluster.js"
import { RUN_SCOPES, TERMINAL, TOOL_SCOPES } from "./Sandboxes.js"
import { type ChildServer, startChild } from "./Server.js"
import { startToolHost, type ToolHost } from "./ToolHost.js"
import { TOOL_ISSUER } from "./ToolSandbox.js"
import { realSleep } from "./Waiting.js"

/**
 * With CLUSTER_DEBUG_DIR set, each node's output and every answer the test got (time, duration,
 * status, RateLimit) are written there when the test ends, for a post-mortem.
 */
export const debugDump = (nodes: () => ReadonlyArray<ChildServer>, tally: Tally) =>
  Effect.gen(function*() {
    const dir = process.env.CLUSTER_DEBUG_DIR
    if (!dir) return
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const n of nodes()) fs.writeFileSync(`${dir}/node-${n.pid}.log`, n.output())
        fs.writeFileSync(
          `${dir}/trace.log`,
          tally.trace.map((t) =>
            `${new Date(t.at).toISOString()} ${t.ms}ms ${t.base ?? ""} ${t.what} -> ${t.status} ${t.rateLimit ?? ""} ${t.text}`
          ).join(
            "\n"
          )
        )
      })
    )
  })

/**
 * The nodes' environment: the operator token, fresh secrets (the runners speak TLS with a key from
 * CLUSTER_SECRET, D20: the nodes form the cluster all the same), tool servers on 127.0.0.1 with
 * short timeouts, and `extra`.
 */
export const clusterEnv = (extra: Record<string, string> = {}): Record<string, string> => ({
  OPERATOR_TOKEN,
  SECRETS_KEY: randomBytes(32).toString("hex"),
  CLUSTER_SECRET: randomBytes(32).toString("hex"),
  TOOL_TOKEN_ISSUER: TOOL_ISSUER,
  DESTINATION_ALLOWLIST: "127.0.0.1/32",
  TOOL_REQUEST_TIMEOUT_SECONDS: "5",
  RECONCILE_POLL_SECONDS: "1",
  DB_POOL_SIZE: "10",
  ...extra
})

/** `count` nodes on one database, each ready (its runner joined) and seen healthy by the first. */
export const startNodes = (databaseUrl: string, env: Record<string, string>, count: number) =>
  Effect.gen(function*() {
    const nodes = yield* Effect.promise(() => Promise.all(Array.from({ length: count }, () => startChild(databaseUrl, env))))
    const addresses = yield* Effect.forEach(nodes, (n) => readyRunner(n), { concurrency: "unbounded" })
    expect(new Set(addresses).size).toBe(count)
    let view: ClusterView = yield* clusterView(nodes[0]!)
    for (let i = 0; i < 100 && view.runners.filter((r) => r.healthy).length < count; i++) {
      yield* realSleep(200)
      view = yield* clusterView(nodes[0]!)
    }
    expect(view.runners.filter((r) => r.healthy).map((r) => r.address).sort()).toEqual([...addresses].sort())
    return { nodes, addresses, nodeOf: new Map(addresses.map((address, i) => [address, nodes[i]!])) }
  })

export const PLAIN_STEPS = [{ type: "sleep", seconds: 1.5 }, { type: "text", text: "done {{input}}" }]
/** A second of thought, a refund (approval, then the write), a second more, the answer. */
export const TOOL_STEPS = [
  { type: "sleep", seconds: 1 },
  { type: "tool_call", tool: "create_refund", input: { order_id: "o-1", amount: 5 } },
  { type: "sleep", seconds: 1 },
  { type: "text", text: "Refunded." }
]

export type LoadCell = CellSetup & { readonly index: number; readonly tool: boolean }

/**
 * `plain` cells running a scripted agent, then `tool` cells whose agent makes a refund at a
 * ToolHost of the tenant's own (answering 1.5 s after the write: writes are in flight). The tool
 * servers fetch the platform's key set from `jwksFrom()` (a load balancer's job in real life).
 */
export const provisionLoadCells = (client: ClusterClient, plain: number, tool: number, jwksFrom: () => ChildServer) =>
  Effect.gen(function*() {
    const hosts = new Map<number, ToolHost>()
    const setups = yield* Effect.forEach(
      Array.from({ length: plain + tool }, (_, i) => i),
      (i) =>
        i < plain
          ? provisionCell(client, `Plain ${i}`, RUN_SCOPES, PLAIN_STEPS)
          : provisionCell(client, `Tools ${i}`, TOOL_SCOPES, TOOL_STEPS, (tenant) =>
            Effect.gen(function*() {
              const host = yield* startToolHost({
                jwksUrl: () => `${jwksFrom().baseUrl}${tenant.P}/jwks.json`,
                issuer: TOOL_ISSUER,
                tenantId: () => tenant.tenantId
              })
              host.knobs.afterWrite = "slow"
              hosts.set(i, host)
              return host.baseUrl
            })),
      { concurrency: 4 }
    )
    const cells: ReadonlyArray<LoadCell> = setups.map((s, i) => ({ ...s, index: i, tool: i >= plain }))
    return { cells, hosts }
  })

/** Where the cells are (every one placed), and the runner that owns the most of them. */
export const busiestRunner = (node: ChildServer, cells: ReadonlyArray<LoadCell>, addresses: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const tenantOf = new Map(cells.map((c) => [c.tenantId, c]))
    const placed = Effect.map(clusterView(node), (v) => v.cells.filter((c) => tenantOf.has(c.tenant_id)))
    let before = yield* placed
    // (a cell between two owners is not listed: seen again shortly)
    for (let i = 0; i < 20 && before.length < cells.length; i++) {
      yield* realSleep(250)
      before = yield* placed
    }
    expect(before.map((c) => c.tenant_id).sort(), "every cell placed").toEqual(cells.map((c) => c.tenantId).sort())
    const perRunner = new Map<string, number>(addresses.map((a) => [a, 0]))
    for (const c of before) perRunner.set(c.runner, (perRunner.get(c.runner) ?? 0) + 1)
    const [victimAddress] = [...perRunner.entries()].sort((x, y) => y[1] - x[1])[0]!
    return { tenantOf, before, perRunner, victimAddress, moving: before.filter((c) => c.runner === victimAddress) }
  })

export interface Admitted {
  readonly id: string
  readonly cell: number
  readonly at: number
}

/**
 * Runs created on every cell (a conversation, then a run, paced per cell), and every write
 * approved as soon as its run asks (polled in the database, so the cells' limits are spent on
 * decisions only). `stop` ends the traffic, `stopApproving` the approvals (after the runs ended).
 */
export const driveLoad = (client: ClusterClient, cells: ReadonlyArray<LoadCell>, sql: SqlClient.SqlClient) =>
  Effect.gen(function*() {
    const admitted = new Map<string, Admitted>()
    const refusals: Array<string> = []
    const pace = { plain: 600, tool: 1500 }
    const decisions = { approved: 0, failed: [] as Array<string> }
    let driving = true
    let approving = true
    const worker = (cell: LoadCell) =>
      Effect.gen(function*() {
        let n = 0
        while (driving) {
          const began = Date.now()
          const conv = yield* client.call("POST", `${cell.P}/conversations`, cell.key, {
            workspace_id: cell.workspaceId,
            agent_revision_id: cell.revisionId
          })
          if (conv.status === 201) {
            const run = yield* client.call("POST", `${cell.P}/conversations/${conv.json.data.id}/runs`, cell.key, {
              input: [{ type: "text", text: `cell ${cell.index} run ${n++}` }]
            })
            if (run.status === 202 || run.status === 200) {
              if (!admitted.has(run.json.data.id)) {
                admitted.set(run.json.data.id, { id: run.json.data.id, cell: cell.index, at: Date.now() })
              }
            } else refusals.push(`run on cell ${cell.index}: ${run.status} ${run.text.slice(0, 300)}`)
          } else refusals.push(`conversation on cell ${cell.index}: ${conv.status} ${conv.text.slice(0, 300)}`)
          yield* realSleep(Math.max(50, (cell.tool ? pace.tool : pace.plain) - (Date.now() - began)))
        }
      })
    const decide = (cell: LoadCell, approvalId: string, token: string) =>
      client.call("POST", `${cell.P}/approvals/${approvalId}/decision`, cell.key, { decision: "approve" }, { "x-actor-token": token })
    const approver = (cell: LoadCell) =>
      Effect.gen(function*() {
        let token: string | undefined
        const decided = new Set<string>()
        while (approving) {
          const waiting = yield* Effect.orDie(sql<{ id: string }>`
            SELECT id FROM runs WHERE workspace_id = ${cell.workspaceId} AND status = 'requires_action'`)
          for (const { id } of waiting) {
            if (decided.has(id)) continue
            const list = yield* client.call("GET", `${cell.P}/approvals?run_id=${id}&status=pending`, cell.key)
            if (list.status !== 200) {
              decisions.failed.push(`list approvals of ${id}: ${list.status} ${list.text.slice(0, 200)}`)
              continue
            }
            for (const approval of list.json.items as Array<{ id: string }>) {
              token ??= yield* cell.actorToken!()
              let d = yield* decide(cell, approval.id, token)
              if (d.status === 403 && d.json?.error?.code === "actor_token_invalid") {
                token = yield* cell.actorToken!()
                d = yield* decide(cell, approval.id, token)
              }
              if (d.status === 200) {
                decisions.approved++
                decided.add(id)
              } else decisions.failed.push(`decide ${approval.id} (run ${id}): ${d.status} ${d.text.slice(0, 200)}`)
            }
          }
          yield* realSleep(300)
        }
      })
    const workers = yield* Effect.forEach(cells, (c) => Effect.fork(worker(c)))
    const approvers = yield* Effect.forEach(cells.filter((c) => c.tool), (c) => Effect.fork(approver(c)))
    const stop = Effect.suspend(() => {
      driving = false
      return Effect.forEach(workers, Fiber.join)
    })
    const stopApproving = Effect.suspend(() => {
      approving = false
      return Effect.forEach(approvers, Fiber.join)
    })
    return { admitted, refusals, pace, decisions, stop, stopApproving }
  })

/**
 * How long after `since` the cell answers again (a read of its workspace) through `over`, or -1
 * after a minute; `last` keeps the latest refusal of each cell. With `giveUpMs`, the prober gives up
 * on a request after that long and sends another (as a client with a timeout would): a request
 * routed to a hung owner waits CLUSTER_SEND_TIMEOUT_SECONDS, and the cell may answer meanwhile.
 */
export const timeToAnswer = (
  cell: CellSetup,
  over: ReadonlyArray<ChildServer>,
  since: number,
  tally: Tally,
  last: Map<string, string>,
  giveUpMs?: number
) =>
  Effect.gen(function*() {
    let turn = 0
    while (Date.now() - since < 60_000) {
      const a = yield* send(
        over[turn++ % over.length]!.baseUrl,
        "GET",
        `${cell.P}/workspaces/${cell.workspaceId}`,
        cell.key,
        giveUpMs === undefined ? {} : { timeoutMs: giveUpMs }
      )
      tallyAnswer(tally, `probe GET ${cell.P}/workspaces`, a)
      if (a.status === 200) return Date.now() - since
      // (a 5xx other than 503 is counted as unexpected, and the probe goes on)
      if (a.status !== 0 && a.status < 500) throw new Error(`probe of ${cell.tenantId}: ${a.status} ${a.text}`)
      last.set(cell.tenantId, `${Date.now() - since} ms: ${a.status} ${a.text.slice(0, 200)}`)
      yield* realSleep(250)
    }
    return -1
  })

/**
 * The books once the traffic stopped: waits up to a minute for every run of the cells to end, then
 * what was lost, left open or unknown, and each approved write as its tool server saw it. A write
 * its run's owner dispatched but never delivered before the owner was lost is reconciled by the new
 * owner as `not_found` (`write_not_applied`, not replayed: contract 4.1 rule 3): such a run must not
 * have reached the tool server; every other tool run wrote exactly once (one operation id).
 */
export const books = (
  sql: SqlClient.SqlClient,
  cells: ReadonlyArray<LoadCell>,
  hosts: ReadonlyMap<number, ToolHost>,
  admitted: ReadonlyMap<string, Admitted>
) =>
  Effect.gen(function*() {
    const runsNow = Effect.orDie(sql<{ id: string; status: string; workspace_id: string }>`
      SELECT id, status, workspace_id FROM runs WHERE workspace_id IN ${sql.in(cells.map((c) => c.workspaceId))}`)
    let runs = yield* runsNow
    const drainStarted = Date.now()
    while (Date.now() - drainStarted < 60_000 && !runs.every((r) => TERMINAL.includes(r.status))) {
      yield* realSleep(250)
      runs = yield* runsNow
    }
    const drainMs = Date.now() - drainStarted
    const status = new Map(runs.map((r) => [r.id, r.status]))
    const toolRuns = runs.filter((r) => cells.some((c) => c.tool && c.workspaceId === r.workspace_id))
    const toolFailures = toolRuns.length === 0 ? [] : yield* Effect.orDie(sql<{ run_id: string; data: any }>`
      SELECT run_id, data FROM run_events WHERE run_id IN ${sql.in(toolRuns.map((r) => r.id))} AND type = 'run.tool_call.failed'`)
    const notApplied = new Set(toolFailures.filter((f) => f.data?.error?.type === "write_not_applied").map((f) => f.run_id))
    let writeRequests = 0
    let duplicates = 0
    const writeProblems: Array<string> = []
    for (const [index, host] of hosts) {
      const mine = toolRuns.filter((r) => r.workspace_id === cells[index]!.workspaceId)
      const writes = host.calls.filter((c) => c.path === "/refunds")
      writeRequests += writes.length
      const operationsOf = new Map<string, Set<string>>()
      for (const w of writes) {
        const ops = operationsOf.get(w.claims.run_id) ?? new Set<string>()
        ops.add(w.operationId!)
        operationsOf.set(w.claims.run_id, ops)
      }
      for (const [runId, ops] of operationsOf) {
        duplicates += ops.size - 1
        if (!status.has(runId)) writeProblems.push(`cell ${index}: a write for run ${runId}, not one of its runs`)
      }
      for (const run of mine) {
        const ops = operationsOf.get(run.id)?.size ?? 0
        const expected = notApplied.has(run.id) ? 0 : 1
        if (ops !== expected) {
          const failures = toolFailures.filter((f) => f.run_id === run.id).map((f) => f.data?.error)
          writeProblems.push(
            `cell ${index}: run ${run.id} (${run.status}) wrote ${ops} times; its tool call failures: ${JSON.stringify(failures)}`
          )
        }
      }
      // one refund kept per operation id, so one per run that wrote
      if (host.refunds.size !== operationsOf.size) {
        writeProblems.push(`cell ${index}: ${host.refunds.size} refunds for ${operationsOf.size} runs that wrote`)
      }
      if (host.rejected.length > 0) writeProblems.push(`cell ${index}: rejected ${JSON.stringify(host.rejected)}`)
    }
    return {
      runs,
      drainMs,
      lost: [...admitted.keys()].filter((id) => !status.has(id)),
      unended: runs.filter((r) => !TERMINAL.includes(r.status)),
      notSucceeded: runs.filter((r) => r.status !== "succeeded"),
      /** runs no client was told of (a retry made a second one) */
      unknownRuns: runs.filter((r) => !admitted.has(r.id)),
      toolRuns,
      notApplied,
      writeRequests,
      duplicates,
      writeProblems,
      writesDone: [...hosts.values()].reduce((n, h) => n + h.refunds.size, 0),
      reconciliations: [...hosts.values()].reduce((n, h) => n + h.calls.filter((c) => c.path.startsWith("/refunds/operations/")).length, 0)
    }
  })
