/** Health (D1): `/healthz` answers while the process runs; `/readyz` once the database is reachable and migrated. */
import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

import { Api } from "../Api.js"
import * as Migrations from "../Database/Migrations.js"
import { Unavailable } from "../Kernel/Errors.js"

export const SystemLive = HttpApiBuilder.group(Api, "system", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const notReady = (message: string) => new Unavailable({ code: "not_ready", message })
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Migrations.applied.pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
          Effect.timeout("2 seconds"),
          Effect.mapError(() => notReady("The database is not reachable")),
          Effect.flatMap((ok) => ok ? Effect.succeed({ status: "ok" as const }) : Effect.fail(notReady("Migrations are not applied")))
        ))
  }))
