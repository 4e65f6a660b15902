/**
 * Health (D1): `/healthz` answers while the process runs; `/readyz` once the database is reachable
 * and migrated and this node's runner has joined the cluster (issue 19), and until it starts stopping
 * (503 from then on, the load balancer's drain window: issue 41).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

import { Api } from "../Api.js"
import { ClusterNode } from "../Cells/Placements.js"
import * as Migrations from "../Database/Migrations.js"
import { Draining } from "../Kernel/Draining.js"
import { Unavailable } from "../Kernel/Errors.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"

export const SystemLive = HttpGroup.group(Api, "system", (handlers) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const node = yield* ClusterNode
    // (the server's: none in a test app built without it)
    const stopping = Option.match(yield* Effect.serviceOption(Draining), {
      onNone: () => Effect.succeed(false),
      onSome: (d) => d.draining
    })
    const notReady = (message: string) => new Unavailable({ code: "not_ready", message })
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Migrations.applied.pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
          Effect.timeout("2 seconds"),
          Effect.mapError(() => notReady("The database is not reachable")),
          Effect.flatMap((ok) => ok ? Effect.void : Effect.fail(notReady("Migrations are not applied"))),
          Effect.zipRight(stopping),
          Effect.flatMap((draining) => draining ? Effect.fail(notReady("This node is stopping")) : node.joined),
          Effect.flatMap((joined) =>
            joined ? Effect.succeed({ status: "ok" as const }) : Effect.fail(notReady("This node has not joined the cluster yet"))
          )
        ))
  }))
