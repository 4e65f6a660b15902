/**
 * This node's cluster runner (issue 19): `@effect/cluster` with its SQL storage (message and runner
 * tables, shard locks as leases in `cluster_locks`: src/Runtime/ShardLeases.ts) on the service's
 * own database, and its socket
 * transport on RUNNER_HOST:RUNNER_PORT. One node is a cluster of one; several nodes on one
 * DATABASE_URL form a cluster with nothing else configured (CLUSTER_SECRET too, when the runners are
 * reachable from elsewhere: src/Runtime/RunnerTransport.ts): cells (entities keyed by
 * tenant/environment) are spread over the runners' shards, and a runner that stops refreshing its
 * shard locks for CLUSTER_LOCK_EXPIRATION_SECONDS loses them to the others, whether it died or
 * hangs with its database sessions open (issue 41).
 *
 * The runner's loops (lock refresh, health checks, polls) always run on the real clock: a suite
 * that moves TestClock by days must not expire every lock. The cells themselves run on the clock
 * of whoever built the service (src/Runtime/CellsLive.ts).
 */
import { MachineId, RunnerAddress, type ShardingConfig, Snowflake } from "@effect/cluster"
import { type SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, ConfigProvider, Context, DefaultServices, Duration, Effect, Exit, Layer, Option, Ref, Scope } from "effect"
import * as net from "node:net"

import { ClusterNode, PlacementsRepo } from "../Cells/Placements.js"
import { AppConfig } from "../Config/AppConfig.js"
import * as Migrations from "../Database/Migrations.js"
import { realPause } from "../Kernel/RealTime.js"
import { layerRunner } from "./RunnerTransport.js"
import * as ShardLeases from "./ShardLeases.js"

/** A port free on `host` now (RUNNER_PORT unset): the runner listens on it a moment later. */
const freePort = (host: string) =>
  Effect.async<number, Error>((resume) => {
    const server = net.createServer()
    server.once("error", (e) => resume(Effect.fail(e)))
    server.listen(0, host, () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resume(Effect.succeed(port)))
    })
  })

/** The shard-lock timings and the rest of the runner's configuration, from AppConfig only. */
const shardingConfig = (config: AppConfig["Type"], address: RunnerAddress.RunnerAddress) => ({
  runnerAddress: Option.some(address),
  runnerListenAddress: Option.some(address),
  shardLockRefreshInterval: Duration.seconds(config.cluster.lockRefreshSeconds),
  shardLockExpiration: Duration.seconds(config.cluster.lockExpirationSeconds),
  // Leases (a row per shard, renewed) rather than advisory locks: an advisory lock lives as long as
  // its session, and a hung process's session stays open until TCP gives up, hours later (issue 41).
  shardLockDisableAdvisory: true,
  // A cell nobody sends to for this long (and not busy: see Cell's keepAlive) is stopped.
  entityMaxIdleTime: Duration.seconds(config.cellIdleTimeoutSeconds),
  // How soon a new owner picks up a moved cell's kept-alive message, and sees a changed ring.
  entityMessagePollInterval: Duration.seconds(1),
  refreshAssignmentsInterval: Duration.seconds(1),
  runnerHealthCheckInterval: Duration.seconds(config.cluster.lockRefreshSeconds)
} satisfies Partial<ShardingConfig.ShardingConfig["Type"]>)

const liveClock = Clock.make()

/** Builds `layer` on the real clock, whatever the caller's (see the module comment). */
export const onRealClock = <A, E, R>(layer: Layer.Layer<A, E, R>) =>
  Layer.locallyWith(layer, DefaultServices.currentServices, Context.add(Clock.Clock, liveClock))

/**
 * Builds `layer` in a scope of its own whose closing is given STOP_MILLIS: leaving the cluster
 * (releasing shards, unregistering, stopping entities) talks to Postgres, and when the database is
 * gone (the embedded Postgres died) it would retry for good and the process would never exit.
 */
const STOP_MILLIS = 10_000
const boundedStop = <A, E, R>(layer: Layer.Layer<A, E, R>): Layer.Layer<A, E | SqlError, R | SqlClient.SqlClient> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      // The library migrates its tables as it starts: one node at a time (Migrations.migrationLock).
      const context = yield* Effect.scoped(Effect.zipRight(Migrations.migrationLock, Layer.buildWithScope(layer, scope))).pipe(
        Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
      )
      yield* Effect.addFinalizer((exit) =>
        Scope.close(scope, exit).pipe(
          Effect.disconnect,
          Effect.timeoutOption(Duration.millis(STOP_MILLIS)),
          Effect.flatMap((done) =>
            done._tag === "None" ? Effect.logWarning("the cluster runner did not stop in time; leaving it") : Effect.void
          )
        )
      )
      return context
    })
  )

/**
 * The runner: Sharding (and its storage) for the cell entity, and ClusterNode. Needs AppConfig and
 * the service's SqlClient (one of its connections is held for good by the shard locks).
 */
export const ClusterLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const host = config.cluster.runnerHost
    const port = Option.isSome(config.cluster.runnerPort) ? config.cluster.runnerPort.value : yield* Effect.orDie(freePort(host))
    const address = RunnerAddress.make(host, port)
    // Only what is configured here: the library would also read HOST, PORT... from the
    // environment, which are the HTTP server's.
    // Its transport: TLS with a key derived from CLUSTER_SECRET when set (D20), else plain TCP
    // (AppConfig allows that only on a loopback RUNNER_HOST).
    const leases = ShardLeases.make(config.cluster.lockExpirationSeconds, config.cluster.lockRefreshSeconds)
    const runner = layerRunner({
      shardingConfig: shardingConfig(config, address),
      secret: Option.getOrUndefined(config.cluster.secret),
      runnerStorage: leases.storage
    }).pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map()))),
      Layer.orDie
    )
    const node = Layer.scoped(
      ClusterNode,
      Effect.gen(function*() {
        const joined = yield* Ref.make(false)
        const me = `${host}:${port}`
        const placements = yield* PlacementsRepo
        // Registered: its row in cluster_runners (written by the runner as it starts).
        yield* Effect.gen(function*() {
          while (!(yield* Ref.get(joined))) {
            if (yield* placements.isRegistered(me).pipe(Effect.orElseSucceed(() => false))) yield* Ref.set(joined, true)
            else yield* realPause(100)
          }
          yield* Effect.logInfo(`cluster runner ${me} joined`)
        }).pipe(Effect.forkScoped)
        // Processed cluster messages (the cells' keep-alives) older than a day go, every 10 minutes.
        yield* Effect.gen(function*() {
          while (true) {
            yield* realPause(10 * 60_000)
            const before = Snowflake.make({ timestamp: Date.now() - 24 * 3600_000, machineId: MachineId.make(0), sequence: 0 })
            yield* placements.pruneMessages(before).pipe(
              Effect.catchAllCause((cause) => Effect.logWarning("pruning cluster messages failed", cause))
            )
          }
        }).pipe(Effect.forkScoped)
        return {
          address: me,
          joined: Ref.get(joined),
          expirationSeconds: config.cluster.lockExpirationSeconds,
          holdsLease: leases.leases.holds
        }
      })
    )
    return onRealClock(Layer.merge(boundedStop(runner), Layer.provide(node, PlacementsRepo.Default)))
  })
)
