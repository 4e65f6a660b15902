/**
 * Stopping a node (issue 41): on SIGTERM `/readyz` turns 503 at once while requests are still
 * served (HTTP_DRAIN_SECONDS, a load balancer's window), their answers closing kept-alive
 * connections; then the listener closes and the process exits promptly (exit code 0).
 */
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as http from "node:http"
import { OPERATOR_TOKEN } from "./support/App.js"
import { readSse } from "./support/Client.js"
import { clusterClient, emptyTally, provisionCell, readyRunner } from "./support/Cluster.js"
import { childDatabase } from "./support/Database.js"
import { RUN_SCOPES } from "./support/Sandboxes.js"
import { killAllChildren, startChild } from "./support/Server.js"
import { realSleep } from "./support/Waiting.js"

afterEach(killAllChildren)

const DRAIN_SECONDS = 2

interface Reply {
  readonly status: number
  readonly body: string
  readonly connection: string | undefined
  readonly socket: number
}

/** A GET through `agent` (or a fresh connection); status 0 when the connection failed. */
const get = (url: string, path: string, agent: http.Agent | false) =>
  Effect.promise(() =>
    new Promise<Reply>((resolve) => {
      const req = http.get(`${url}${path}`, { agent }, (res) => {
        // (read now: the socket goes back to the agent once the answer has been read)
        const socket = (res.socket as unknown as { id?: number } | null)?.id ?? -1
        let body = ""
        res.on("data", (c: Buffer) => (body += c.toString("utf8")))
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body,
            connection: res.headers.connection,
            socket
          }))
      })
      req.on("socket", (s) => {
        const tagged = s as unknown as { id?: number }
        tagged.id ??= Math.random()
      })
      req.on("error", (e) => resolve({ status: 0, body: String(e), connection: undefined, socket: -1 }))
    })
  )

describe("stopping a node", () => {
  it.live(
    "SIGTERM: /readyz is 503 first while requests are answered, kept-alive connections are closed by their answers, then the listener closes and the node exits (an event stream served before and one open do not hold it: they end with their cells)",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const { db } = yield* childDatabase
        const node = yield* Effect.promise(() => startChild(db.url, { OPERATOR_TOKEN, HTTP_DRAIN_SECONDS: String(DRAIN_SECONDS) }))
        yield* readyRunner(node)
        // one event stream read to its end (its run cancelled), one open at the stop
        const client = clusterClient(() => [node], emptyTally())
        const cell = yield* provisionCell(client, "Streams Co", RUN_SCOPES, [{ type: "sleep", seconds: 120 }, {
          type: "text",
          text: "late"
        }])
        const auth = { authorization: `Bearer ${cell.key}` }
        const startRun = Effect.gen(function*() {
          const conversation = yield* client.must(201, "POST", `${cell.P}/conversations`, cell.key, {
            workspace_id: cell.workspaceId,
            agent_revision_id: cell.revisionId
          })
          return (yield* client.must(202, "POST", `${cell.P}/conversations/${conversation.id}/runs`, cell.key, {
            input: [{ type: "text", text: "x" }]
          })).id as string
        })
        const ended = yield* startRun
        const endedStream = yield* readSse(`${node.baseUrl}${cell.P}/runs/${ended}/events/stream`, auth).pipe(Effect.fork)
        yield* realSleep(300)
        yield* client.must(202, "POST", `${cell.P}/runs/${ended}/cancel`, cell.key)
        expect((yield* Fiber.join(endedStream)).frames.at(-1)?.event).toBe("run.cancelled")
        const openStream = yield* readSse(`${node.baseUrl}${cell.P}/runs/${yield* startRun}/events/stream`, auth).pipe(Effect.fork)
        yield* realSleep(300)

        const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
        yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))
        const before = yield* get(node.baseUrl, "/healthz", agent)
        expect(before.status).toBe(200)
        expect(before.connection).toBe("keep-alive")

        const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
          node.child.once("exit", (code) => resolve({ code, at: Date.now() }))
        )
        node.signal("SIGTERM")
        const stoppedAt = Date.now()
        yield* realSleep(300)
        // the kept-alive connection still gets its answers: /readyz 503, and with it the connection closes
        const readyz = yield* get(node.baseUrl, "/readyz", agent)
        expect({ status: readyz.status, connection: readyz.connection }).toEqual({ status: 503, connection: "close" })
        expect(JSON.parse(readyz.body).error).toMatchObject({ code: "not_ready", message: "This node is stopping" })
        expect(readyz.socket, "the same kept-alive connection").toBe(before.socket)
        // new connections are still answered during the window
        const during = yield* get(node.baseUrl, "/healthz", false)
        expect(during.status).toBe(200)
        expect(Date.now() - stoppedAt).toBeLessThan(DRAIN_SECONDS * 1000)

        // after the window: no listener; the process exits promptly
        yield* realSleep(Math.max(0, stoppedAt + DRAIN_SECONDS * 1000 + 300 - Date.now()))
        const after = yield* get(node.baseUrl, "/healthz", false)
        expect(after.status, after.body).toBe(0)
        const exit = yield* Effect.promise(() => exited)
        const exitMs = exit.at - stoppedAt
        console.log(`drain: readyz_503_after_ms=300 exit_ms=${exitMs}`)
        expect(exit.code, node.output().slice(-3000)).toBe(0)
        expect(exitMs, node.output().slice(-3000)).toBeLessThan(DRAIN_SECONDS * 1000 + 5000)
        expect(node.output()).toMatch(/draining: \/readyz answers 503[\s\S]*listener closed; 0 request\(s\) still being answered/)
        // the open stream ended with its cell
        expect((yield* Fiber.join(openStream)).frames[0]?.event).toBe("run.queued")
      })),
    120_000
  )
})
