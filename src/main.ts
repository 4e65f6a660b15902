/**
 * Composition root: `npm start`. Config from the environment (see README), Postgres from
 * DATABASE_URL or embedded, migrations, then the HTTP server; OpenTelemetry traces when an
 * `OTEL_EXPORTER_OTLP_*ENDPOINT` is set (docs/operations.md). SIGTERM/SIGINT interrupt the main
 * fiber: the server stops accepting, in-flight requests finish, the embedded Postgres stops, the
 * last spans are sent.
 */
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Config, Console, Effect, Exit, Layer, Logger, LogLevel, Option, Redacted } from "effect"

import { AppConfig } from "./Config/AppConfig.js"
import { DatabaseLive, DatabaseWatch } from "./Database/Client.js"
import { isLostConnection } from "./Database/Defects.js"
import { DrainLive, ServerLive } from "./Edge/Server.js"
import { HttpLive } from "./Http.js"
import { TracingLive } from "./Observability/Tracing.js"
import { localUrl, removeServiceFile, writeServiceFile } from "./Operator/LocalFiles.js"
import { OperatorToken } from "./Operator/Token.js"

const Announce = Layer.scopedDiscard(
  Effect.gen(function*() {
    const server = yield* HttpServer.HttpServer
    const config = yield* AppConfig
    const token = yield* OperatorToken
    const address = server.address._tag === "TcpAddress"
      ? `http://${server.address.hostname}:${server.address.port}`
      : server.address.path
    // D19: the token is printed once, when generated, so a new operator can use the CLI: to stdout,
    // not through the logger, so log pipelines never hold it. Otherwise only its source is logged.
    if (token.source === "generated") {
      yield* Console.log(`operator token (generated, stored in ${token.file}): ${Redacted.value(token.token)}`)
    } else if (token.source === "file") {
      yield* Effect.logInfo(`operator token: from DATA_DIR/operator-token (${token.file})`)
    } else {
      yield* Effect.logInfo("operator token: from OPERATOR_TOKEN")
    }
    // The address for the CLI and quickstart in a second terminal (removed when the service stops).
    if (server.address._tag === "TcpAddress") {
      const url = localUrl(server.address.hostname, server.address.port)
      yield* Effect.acquireRelease(
        Effect.sync(() => writeServiceFile(config.dataDir, url)),
        () => Effect.sync(() => removeServiceFile(config.dataDir))
      ).pipe(Effect.catchAllDefect((e) => Effect.logWarning(`DATA_DIR/service.json not written: ${String(e)}`)))
    }
    // Shutdown, logged: finalizers run in reverse, so this one runs first, before the server closes.
    yield* Effect.addFinalizer(() => Effect.logInfo("Agent Platform shutting down: no new connections, in-flight requests finish"))
    // Last, so whoever waits for this line has seen everything printed before it.
    yield* Effect.logInfo(`Agent Platform listening on ${address}`).pipe(
      Effect.annotateLogs({ public_base_url: Option.getOrElse(config.publicBaseUrl, () => address) })
    )
  })
)

/** Exits with code 1 after `millis` unless the process has stopped by then (a stop that hangs). */
const exitUnlessStopped = (millis: number, message: string) =>
  setTimeout(() => {
    console.error(message)
    process.exit(1)
  }, millis).unref()

/**
 * A stop that takes longer than SHUTDOWN_TIMEOUT_SECONDS after its signal exits with code 1 all the
 * same (issue 41): with a database that stopped answering (a frozen host, a partition), the
 * requests waiting for it and the cluster runner's leaving would hold the process for good, and a
 * supervisor waits for the exit before starting another. Armed first, before anything can hang.
 */
const ShutdownDeadline = Layer.effectDiscard(Effect.map(AppConfig, (config) => {
  const seconds = config.edge.shutdownTimeoutSeconds
  const arm = (signal: string) => () =>
    exitUnlessStopped(seconds * 1000, `stopping took longer than ${seconds} s after ${signal} (SHUTDOWN_TIMEOUT_SECONDS): exiting now`)
  process.once("SIGTERM", arm("SIGTERM"))
  process.once("SIGINT", arm("SIGINT"))
}))

/** Logged when everything has stopped (acquired first, so released last). */
const Stopped = Layer.scopedDiscard(
  Effect.addFinalizer((exit) =>
    Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)
      ? Effect.logError("Agent Platform stopped after a failure", exit.cause)
      : Effect.logInfo("Agent Platform stopped")
  )
)

const LogLevelLive = Layer.unwrapEffect(
  Effect.map(
    Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info)),
    (level) => Logger.minimumLogLevel(level)
  )
)

/**
 * `LOG_FORMAT=json`: one JSON object per line, annotations (request_id, tenant_id, run_id...)
 * included, instead of the pretty logger `runMain` installs (or Effect's default one).
 */
const LogFormatLive = Layer.unwrapEffect(
  Effect.map(
    Config.literal("text", "json")("LOG_FORMAT").pipe(Config.withDefault("text" as const)),
    (format) => (format === "json" ? Layer.merge(Logger.json, Logger.remove(Logger.prettyLoggerDefault)) : Layer.empty)
  )
)

export const MainLive = Layer.merge(Announce, DrainLive).pipe(
  Layer.provideMerge(HttpLive),
  Layer.provide(ServerLive),
  Layer.provideMerge(DatabaseLive),
  Layer.provideMerge(Stopped),
  Layer.provideMerge(ShutdownDeadline),
  Layer.provide(AppConfig.layer),
  // The tracer is set before anything that makes spans is built, and flushed after all has stopped.
  Layer.provide(TracingLive),
  Layer.provide(LogLevelLive),
  Layer.provide(LogFormatLive)
)

// The Postgres driver can emit a lost connection's 'error' on a client that has no listener at that
// moment (a window in @effect/sql-pg 0.53 between releasing a client and the pool's own listener),
// which Node turns into a crash with a stack trace. The connection is gone either way: the pool
// replaces it, and a lost embedded Postgres stops the service through DatabaseWatch. Anything else
// uncaught is still fatal, as by default.
process.on("uncaughtException", (error) => {
  if (isLostConnection(error)) {
    console.warn(`a database connection was lost: ${error.message}`)
    return
  }
  console.error(error)
  process.exit(1)
})

/** How long stopping may take once the embedded Postgres died, before the process exits anyway. */
const LOST_STOP_MILLIS = 10_000

// Serves until interrupted (SIGINT/SIGTERM: graceful shutdown, exit 0), or until the embedded
// Postgres dies under it (shutdown, then exit 1). With the database gone, a finalizer that still
// wants it (the cluster runner leaving, a reconnecting listener) could hold the process for good
// (a CI run saw one do so, 30 s and more): stopping gets LOST_STOP_MILLIS, then the process exits
// 1 all the same, and a supervisor restarts both.
Effect.flatMap(DatabaseWatch, (watch) => watch.lost).pipe(
  Effect.tapError((lost) =>
    Effect.sync(() =>
      exitUnlessStopped(LOST_STOP_MILLIS, `${lost.message}; stopping took longer than ${LOST_STOP_MILLIS / 1000} s: exiting now`)
    )
  ),
  Effect.provide(MainLive),
  NodeRuntime.runMain
)
