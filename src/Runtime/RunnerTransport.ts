/**
 * The runner's transport (D20: nodes trust only nodes). `@effect/cluster`'s socket runner speaks
 * its RPC over plain TCP (`@effect/platform-node`'s `NodeClusterSocket.layer`: `NodeSocket.makeNet`
 * to connect, `NodeSocketServer` to listen) and has no option for a credential or TLS. This module
 * is the same composition with its own two transport layers when CLUSTER_SECRET is set:
 *
 *   - TLS 1.3 with a pre-shared key (no certificates) on both sides: the key is derived from
 *     CLUSTER_SECRET (HKDF-SHA256), the server accepts only a client that proves it and the client
 *     only a server that proves it (a wrong key fails the handshake's binder or Finished check), and
 *     everything after is encrypted (AES-128-GCM or ChaCha20-Poly1305, with an ephemeral (EC)DHE
 *     share: forward secrecy). The secret itself never crosses the wire.
 *   - The server hands a connection to the RPC server only once its handshake is complete (Node's
 *     `secureConnection`): a connection that does not prove the key is closed by TLS before any
 *     byte of it reaches the RPC decoder. A handshake must finish within 5 s.
 *
 * Without CLUSTER_SECRET (allowed only when RUNNER_HOST is a loopback address, AppConfig), the
 * library's own plain layers are used, as before.
 */
import { RunnerHealth, Runners, type RunnerStorage, ShardingConfig, SocketRunner, SqlMessageStorage } from "@effect/cluster"
import { Socket, SocketServer } from "@effect/platform"
import { NodeClusterSocket, NodeSocket } from "@effect/platform-node"
import { RpcClient, RpcSerialization } from "@effect/rpc"
import type { SqlClient } from "@effect/sql"
import { Deferred, Effect, Exit, FiberSet, Layer, Redacted, Runtime, Scope } from "effect"
import { hkdfSync } from "node:crypto"
import * as tls from "node:tls"

/** What both sides offer: TLS 1.3 only, its SHA-256 suites (a PSK from Node's callbacks is bound to SHA-256). */
const TLS_OPTIONS = {
  minVersion: "TLSv1.3",
  maxVersion: "TLSv1.3",
  ciphers: "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256"
} satisfies tls.SecureContextOptions

/** The PSK identity (sent in clear: it names the scheme, not the key). */
const IDENTITY = "agent-platform-cluster-v1"

/** A handshake that has not finished by then is dropped. */
const HANDSHAKE_MILLIS = 5_000
/** Connecting to another runner, TLS handshake included (the library allows 1 s for its TCP connect). */
const OPEN_TIMEOUT_MILLIS = 2_000
/** Refused handshakes are logged at most this often (a scan or a flood must not flood the log). */
const REFUSAL_LOG_MILLIS = 60_000

/** The transport's key: 32 bytes derived from CLUSTER_SECRET (its UTF-8 text). */
export const derivePsk = (secret: Redacted.Redacted<string>): Buffer =>
  Buffer.from(hkdfSync("sha256", Buffer.from(Redacted.value(secret), "utf8"), "agent-platform cluster", "runner transport psk v1", 32))

/** A TLS connection to `address` that proved `psk` (the socket once its handshake completed). */
const connectTls = (address: { readonly host: string; readonly port: number }, psk: Buffer) =>
  Effect.scopeWith((scope) => {
    let conn: tls.TLSSocket | undefined
    return Effect.zipRight(
      Scope.addFinalizer(
        scope,
        Effect.sync(() => {
          if (conn !== undefined && !conn.closed) conn.destroySoon()
        })
      ),
      Effect.async<tls.TLSSocket, Socket.SocketError>((resume) => {
        const socket = tls.connect({
          ...TLS_OPTIONS,
          host: address.host,
          port: address.port,
          pskCallback: () => ({ psk, identity: IDENTITY }),
          // no certificate: the server is authenticated by the key
          checkServerIdentity: () => undefined
        })
        conn = socket
        socket.once("secureConnect", () => resume(Effect.succeed(socket)))
        socket.on("error", (cause) => resume(Effect.fail(new Socket.SocketGenericError({ reason: "Open", cause }))))
      })
    )
  })

/** `Runners.RpcClientProtocol` over TLS-PSK: as `NodeClusterSocket.layerClientProtocol`, with `connectTls`. */
export const layerClientProtocol = (psk: Buffer) =>
  Layer.effect(
    Runners.RpcClientProtocol,
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      return (address) =>
        Effect.gen(function*() {
          const socket = yield* NodeSocket.fromDuplex(connectTls(address, psk), { openTimeout: OPEN_TIMEOUT_MILLIS })
          return yield* RpcClient.makeProtocolSocket().pipe(
            Effect.provideService(Socket.Socket, socket),
            Effect.provideService(RpcSerialization.RpcSerialization, serialization)
          )
        }).pipe(Effect.orDie)
    })
  )

/**
 * A `SocketServer` on `host:port` speaking TLS-PSK: as `NodeSocketServer.make` (the library's), with
 * a TLS server whose connections reach the handler only after their handshake.
 */
const makeTlsServer = (listen: { readonly host: string; readonly port: number }, psk: Buffer) =>
  Effect.gen(function*() {
    const failed = yield* Deferred.make<never, Error>()
    const logRuntime = yield* Effect.runtime<never>()
    const pending: Array<tls.TLSSocket> = []
    let onConnection = (conn: tls.TLSSocket) => {
      pending.push(conn)
    }
    let refused = 0
    let lastLogged = 0
    const server = tls.createServer({
      ...TLS_OPTIONS,
      handshakeTimeout: HANDSHAKE_MILLIS,
      pskCallback: (_socket, identity) => (identity === IDENTITY ? psk : null)
    }, (conn) => onConnection(conn))
    // A connection that did not prove the key (plain TCP, another key, a scan, a timeout): Node
    // has destroyed it already; counted, and logged at most once a minute.
    server.on("tlsClientError", (error: NodeJS.ErrnoException, socket: tls.TLSSocket) => {
      refused++
      const now = Date.now()
      if (now - lastLogged < REFUSAL_LOG_MILLIS) return
      lastLogged = now
      const count = refused
      refused = 0
      Runtime.runFork(logRuntime)(
        Effect.logWarning(
          `runner port: ${count} connection(s) refused since the last report: they did not prove CLUSTER_SECRET ` +
            `(last from ${socket.remoteAddress ?? "unknown"}: ${error.code ?? error.message})`
        )
      )
    })
    server.on("error", (cause) => Deferred.unsafeDone(failed, Exit.fail(cause)))
    yield* Effect.addFinalizer(() => Effect.async<void>((resume) => void server.close(() => resume(Effect.void))))
    yield* Effect.async<void>((resume) => void server.listen(listen.port, listen.host, () => resume(Effect.void))).pipe(
      Effect.raceFirst(Effect.mapError(Deferred.await(failed), (cause) => new SocketServer.SocketServerError({ reason: "Open", cause })))
    )

    const run = <R, E, _>(handler: (socket: Socket.Socket) => Effect.Effect<_, E, R>) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const fibers = yield* FiberSet.make().pipe(Scope.extend(scope))
        const runFork = yield* FiberSet.runtime(fibers)<R>()
        const serve = (conn: tls.TLSSocket) => {
          let error: Error | undefined
          conn.on("error", (e) => {
            error = e
          })
          const open = Effect.acquireRelease(
            Effect.suspend((): Effect.Effect<tls.TLSSocket, Socket.SocketError> =>
              error !== undefined
                ? Effect.fail(new Socket.SocketGenericError({ reason: "Open", cause: error }))
                : conn.closed
                ? Effect.fail(new Socket.SocketCloseError({ reason: "Close", code: 1000 }))
                : Effect.succeed(conn)
            ),
            (c) =>
              Effect.sync(() => {
                if (!c.closed) c.destroySoon()
              })
          )
          runFork(
            NodeSocket.fromDuplex(open).pipe(
              Effect.flatMap(handler),
              Effect.catchAllCause((cause) => Effect.logDebug("runner connection ended", cause)),
              Effect.provideService(NodeSocket.NetSocket, conn)
            )
          )
        }
        return yield* Effect.async<never>(() => {
          const previous = onConnection
          onConnection = serve
          pending.splice(0).forEach(serve)
          return Effect.suspend(() => {
            onConnection = previous
            return Scope.close(scope, Exit.void)
          })
        }).pipe(
          Effect.raceFirst(
            Effect.mapError(Deferred.await(failed), (cause) => new SocketServer.SocketServerError({ reason: "Unknown", cause }))
          )
        )
      })

    const address = server.address()
    return SocketServer.SocketServer.of({
      address: typeof address === "string" || address === null
        ? { _tag: "UnixAddress", path: String(address) }
        : { _tag: "TcpAddress", hostname: address.address, port: address.port },
      run
    })
  })

/** The TLS-PSK `SocketServer` on the runner's listen address (as `NodeClusterSocket.layerSocketServer`). */
export const layerSocketServer = (psk: Buffer) =>
  Layer.scoped(
    SocketServer.SocketServer,
    Effect.gen(function*() {
      const config = yield* ShardingConfig.ShardingConfig
      const listen = config.runnerListenAddress._tag === "Some" ? config.runnerListenAddress : config.runnerAddress
      if (listen._tag === "None") return yield* Effect.dieMessage("the runner has no listen address")
      return yield* makeTlsServer(listen.value, psk)
    })
  )

/**
 * The runner: `NodeClusterSocket.layer({ storage: "sql", shardingConfig })`'s composition (socket
 * runner, ping health checks, SQL message and runner storage, MessagePack), its transport TLS-PSK
 * when `secret` is set and the library's plain TCP otherwise.
 */
export const layerRunner = (options: {
  readonly shardingConfig: Partial<ShardingConfig.ShardingConfig["Type"]>
  readonly secret: Redacted.Redacted<string> | undefined
  /** the runner storage (shard leases and the runners table: src/Runtime/ShardLeases.ts) */
  readonly runnerStorage: Layer.Layer<RunnerStorage.RunnerStorage, never, SqlClient.SqlClient | ShardingConfig.ShardingConfig>
}) => {
  const psk = options.secret === undefined ? undefined : derivePsk(options.secret)
  const clientProtocol = psk === undefined ? NodeClusterSocket.layerClientProtocol : layerClientProtocol(psk)
  const socketServer = psk === undefined ? NodeClusterSocket.layerSocketServer : layerSocketServer(psk)
  const health = RunnerHealth.layerPing.pipe(Layer.provide(Runners.layerRpc), Layer.provide(clientProtocol))
  return Layer.provide(SocketRunner.layer, [socketServer, clientProtocol]).pipe(
    Layer.provide(health),
    Layer.provideMerge(Layer.orDie(SqlMessageStorage.layer)),
    Layer.provide(options.runnerStorage),
    Layer.provide(ShardingConfig.layerFromEnv(options.shardingConfig)),
    // exactly the library's (no msgpackr records): nodes of either composition understand each other
    Layer.provide(RpcSerialization.layerMsgPackWith({}))
  )
}
