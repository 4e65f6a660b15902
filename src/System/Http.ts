import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { loader } from "../Database/Migrations.js"
import { Unavailable } from "../Kernel/Errors.js"

export const SystemLive = HttpApiBuilder.group(Api, "system", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const expected = (yield* loader).length
    const notReady = (message: string) => new Unavailable({ code: "not_ready", message })
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM effect_sql_migrations`.pipe(
          Effect.timeout("2 seconds"),
          Effect.mapError(() => notReady("The database is not reachable")),
          Effect.flatMap(([row]) =>
            (row?.n ?? 0) >= expected ? Effect.succeed({ status: "ok" as const }) : Effect.fail(notReady("Migrations are not applied"))
          )
        ))
  }))
