/**
 * Nodes trust only nodes (D20, issue 35): with CLUSTER_SECRET, the runner port speaks TLS with a key
 * derived from it. An attacker who reaches the port builds a client on the library's own RPC
 * client and protocol (`Runners.makeRpcClient` over `NodeClusterSocket.layerClientProtocol`: what
 * the runners themselves used before) and addresses a cell as the runners do (entity "Cell", its
 * key, its shard by the library's hash). Against a secured runner it gets nothing executed: no
 * Ping, no GetCellStats, and its EndRuns does not end the live run. A client proving another
 * secret is refused the same way; one proving the right secret is answered (the control: the
 * attacker's requests are well formed). Without the secret, the same client was answered and its
 * EndRuns cancelled the run.
 */
import { EntityAddress, EntityId, EntityType, MachineId, type RunnerAddress, Runners, ShardId, Snowflake } from "@effect/cluster"
import { Headers } from "@effect/platform"
import { NodeClusterSocket } from "@effect/platform-node"
import { RpcClient, RpcSerialization } from "@effect/rpc"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, type Layer, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"

import { defaultClusterConfig } from "../src/Config/AppConfig.js"
import { derivePsk, layerClientProtocol } from "../src/Runtime/RunnerTransport.js"
import { makeTestApp } from "./support/App.js"
import { operator } from "./support/Client.js"
import { expectSingle } from "./support/Envelopes.js"
import { scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

/** The library's shard of an entity id (its internal `hashString`, 300 shards per group by default). */
const shardOf = (entityId: string) => {
  let h = 5381
  let i = entityId.length
  while (i) h = (h * 33) ^ entityId.charCodeAt(--i)
  h = (h & 0xbfffffff) | ((h >>> 1) & 0x40000000)
  return Math.abs(h % 300) + 1
}

/** A client of a runner's RPC (Ping, Effect: a request to an entity) over `protocol`. */
const runnerClient = (
  protocol: Layer.Layer<Runners.RpcClientProtocol, never, RpcSerialization.RpcSerialization>,
  address: RunnerAddress.RunnerAddress
) =>
  Effect.gen(function*() {
    const connect = yield* Runners.RpcClientProtocol
    const client = yield* Effect.flatMap(connect(address), (p) => Effect.provideService(Runners.makeRpcClient, RpcClient.Protocol, p))
    let sequence = 0
    /** The cell `tenant/environment` is sent `command` (a volatile request, as the nodes send). */
    const toCell = (cell: string, command: "GetCellStats" | "EndRuns") =>
      client.Effect({
        persisted: false,
        request: {
          _tag: "Request",
          requestId: Snowflake.make({ timestamp: Date.now(), machineId: MachineId.make(999), sequence: ++sequence }),
          address: EntityAddress.make({
            shardId: ShardId.make("default", shardOf(cell)),
            entityType: EntityType.EntityType.make("Cell"),
            entityId: EntityId.make(cell)
          }),
          tag: command,
          payload: { _tag: command },
          headers: Headers.empty
        }
      })
    return { ping: client.Ping(), toCell }
  }).pipe(Effect.provide(protocol), Effect.provide(RpcSerialization.layerMsgPackWith({})))

/** `effect` within 3 s: its exit (a timeout is a failure). */
const within3s = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.exit(Effect.timeoutFail(effect, { duration: "3 seconds", onTimeout: () => "no answer" }))

describe("the runner port: nodes trust only nodes (D20)", () => {
  const secret = randomBytes(32).toString("hex")
  it.live(
    "with CLUSTER_SECRET, the library's own client over plain TCP gets no Ping, no GetCellStats, and its EndRuns does not end a live run; another secret is refused; the secret is answered",
    () =>
      Effect.gen(function*() {
        const s = yield* scriptedSandbox([{ type: "sleep", seconds: 60 }, { type: "text", text: "late" }])
        const run = expectSingle(yield* s.startRun((yield* s.conversation()).id), 202)
        yield* eventually(s.getRun(run.id), (r) => r.status === "running")
        const view = yield* operator("GET", "/cluster")
        const [host, port] = (view.body.runners.find((r: any) => r.self).address as string).split(":")
        const address = { host: host!, port: Number(port) } as RunnerAddress.RunnerAddress
        const cell = `${s.tenantId}/sandbox`

        // The library's own client, over plain TCP.
        const plain = yield* runnerClient(NodeClusterSocket.layerClientProtocol, address)
        expect(Exit.isFailure(yield* within3s(plain.ping)), "Ping over plain TCP").toBe(true)
        expect(Exit.isFailure(yield* within3s(plain.toCell(cell, "GetCellStats"))), "GetCellStats over plain TCP").toBe(true)
        expect(Exit.isFailure(yield* within3s(plain.toCell(cell, "EndRuns"))), "EndRuns over plain TCP").toBe(true)

        // TLS with a key from another secret: refused at the handshake.
        const other = yield* runnerClient(layerClientProtocol(derivePsk(Redacted.make(randomBytes(32).toString("hex")))), address)
        expect(Exit.isFailure(yield* within3s(other.ping)), "Ping with another secret").toBe(true)
        expect(Exit.isFailure(yield* within3s(other.toCell(cell, "EndRuns"))), "EndRuns with another secret").toBe(true)

        // The run goes on: its cell still drives it.
        expect((yield* s.getRun(run.id)).status).toBe("running")
        const stats = yield* operator("GET", `/tenants/${s.tenantId}/environments/sandbox/cell`)
        expect(stats.body, stats.text).toMatchObject({ running_actors: 1 })

        // The control: the same requests proving the cluster's secret are answered.
        const node = yield* runnerClient(layerClientProtocol(derivePsk(Redacted.make(secret))), address)
        expect(Exit.isSuccess(yield* within3s(node.ping)), "Ping with the secret").toBe(true)
        const answered = yield* within3s(node.toCell(cell, "GetCellStats"))
        expect(Exit.isSuccess(answered) && JSON.stringify(answered.value), "GetCellStats with the secret").toContain("running_actors")
      }).pipe(
        Effect.scoped,
        Effect.provide(makeTestApp({ cluster: { ...defaultClusterConfig, secret: Option.some(Redacted.make(secret)) } }))
      ),
    60_000
  )
})
