/**
 * A database that cannot be reached is a 503 (`unavailable`, code `database_unavailable`, with
 * `Retry-After`), one of the documented status codes, not a 500; nothing is stored for the
 * idempotency key, and the service serves again once the database is back. The outage is real:
 * the test database stops accepting connections and its sessions are terminated.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeTestApp } from "./support/App.js"
import { provisionSandbox, request } from "./support/Client.js"
import { admin, freshDatabase } from "./support/Database.js"

const sql = (text: string) => Effect.promise(() => admin((c) => c.query(text)))

describe("database outage", () => {
  it.live(
    "requests get 503 database_unavailable with Retry-After while the database is unreachable, and succeed after",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        yield* Effect.gen(function*() {
          const sb = yield* provisionSandbox(["users:read", "users:write"])
          const users = (idempotencyKey: string) =>
            request("POST", `${sb.P}/users`, { key: sb.key, idempotencyKey, body: { external_id: "u-outage", display_name: "Ada" } })
          expect((yield* request("GET", `${sb.P}/users`, { key: sb.key })).status).toBe(200)

          yield* sql(`ALTER DATABASE ${db.name} WITH ALLOW_CONNECTIONS false`)
          yield* sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${db.name}'`)
          for (const res of [yield* request("GET", `${sb.P}/users`, { key: sb.key }), yield* users("k-outage")]) {
            expect(res.status, res.text).toBe(503)
            expect(res.body.error).toMatchObject({ type: "unavailable", code: "database_unavailable" })
            expect(res.headers.get("retry-after")).toBe("2")
            expect(res.headers.get("x-request-id")).toMatch(/\S/)
          }

          yield* sql(`ALTER DATABASE ${db.name} WITH ALLOW_CONNECTIONS true`)
          // the same idempotency key executes now (the 503 was not stored)
          const created = yield* users("k-outage")
          expect(created.status, created.text).toBe(201)
          expect(created.headers.get("idempotent-replayed")).toBeNull()
        }).pipe(Effect.scoped, Effect.provide(makeTestApp({}, db.url)))
      }).pipe(Effect.scoped),
    60_000
  )
})
