/**
 * Migration 0024 (D20, issue 35) on deliveries written before it: each event gets its one
 * `webhook_events` row, the deliveries drop their copied body, and the body the worker now builds
 * when it claims a delivery is byte for byte the one stored before (written by the real
 * `webhook_enqueue` of migration 0011); `attempts` keeps the last 50 and `attempt_count` counts them.
 */
import { Migrator, SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as Migrations from "../src/Database/Migrations.js"
import { WebhooksRepo } from "../src/Webhooks/Repo.js"
import { freshDatabase } from "./support/Database.js"

/** D20: a delivery keeps its last 50 attempts. */
const KEPT_ATTEMPTS = 50

/** Every migration before 0024. */
const migrateBefore0024 = Migrator.make({})({
  loader: Effect.map(Migrations.loader, (all) => all.filter(([id]) => id < 24))
})

/** Data in tricky spacing and escapes: the `json` text must come back as it was given. */
const DATA = `{"name" : "caf\\u00e9 é",  "nested": [1, {"a": null, "b" : "x\\"y"}], "n": 1.50}`

describe("migration 0024: webhook events stored once", () => {
  it.live(
    "existing deliveries keep their exact body, built from the event stored once; attempts trimmed to 50 and counted",
    () =>
      Effect.gen(function*() {
        const db = yield* freshDatabase
        const client = yield* Layer.build(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 2 }))
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* migrateBefore0024
          yield* sql`INSERT INTO tenants (id, name, status, created_at, updated_at) VALUES ('ten_m', 'M', 'active', now(), now())`
          yield* sql`
          INSERT INTO environments (tenant_id, name, id, state, created_at, updated_at)
          VALUES ('ten_m', 'sandbox', 'env_m', 'ready', now(), now())`
          yield* sql`
          INSERT INTO api_keys (id, tenant_id, environment, name, kind, prefix, secret_hash, scopes, created_at)
          VALUES ('key_m', 'ten_m', 'sandbox', 'k', 'console', 'p', '\\x00', '{}', now())`
          for (const id of ["we_1", "we_2"]) {
            yield* sql`
            INSERT INTO webhook_endpoints (id, tenant_id, environment, url, event_types, secret_ciphertext, secret_iv,
                                           secret_tag, created_by_key_id, created_at, updated_at)
            VALUES (${id}, 'ten_m', 'sandbox', 'https://hooks.example.com/x', ARRAY['approval.expired'], '\\x01', '\\x02',
                    '\\x03', 'key_m', now(), now())`
          }
          const at = new Date("2026-01-02T03:04:05.678Z")
          yield* sql`SELECT webhook_enqueue('ten_m', 'sandbox', 'approval.expired', 'evt_1', ${at}, ${DATA}::json)`
          yield* sql`SELECT webhook_enqueue('ten_m', 'sandbox', 'approval.expired', 'evt_2', ${at}, json_build_object('x', 1))`
          const before = yield* sql<{ id: string; event_id: string; body: string }>`
          SELECT id, event_id, body FROM webhook_deliveries ORDER BY id`
          expect(before).toHaveLength(4)
          expect(before.filter((d) => d.event_id === "evt_1")[0]!.body).toContain(DATA)
          // one delivery with 60 attempts (replays), status codes 1..60 in order
          const long = before[0]!.id
          yield* sql`
          UPDATE webhook_deliveries SET attempts = (
            SELECT jsonb_agg(jsonb_build_object('at', '2026-01-02T03:04:05.678Z', 'status_code', g, 'duration_ms', 1,
                                                'error', 'the endpoint answered 500') ORDER BY g)
            FROM generate_series(1, 60) g)
          WHERE id = ${long}`

          yield* Migrations.run

          const events = yield* sql<{ id: string; data: string }>`SELECT id, data::text AS data FROM webhook_events ORDER BY id`
          expect(events.map((e) => e.id)).toEqual(["evt_1", "evt_2"])
          expect(events[0]!.data).toBe(DATA)
          const columns = (yield* sql<{ name: string }>`
          SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'webhook_deliveries'`).map((c) => c.name)
          expect(columns).not.toContain("body")
          expect(columns).toContain("attempt_count")
          const after = yield* sql<{ id: string; attempts: Array<{ status_code: number }>; attempt_count: number }>`
          SELECT id, attempts, attempt_count FROM webhook_deliveries ORDER BY id`
          expect(after.map((d) => [d.id, d.attempt_count])).toEqual(before.map((d) => [d.id, d.id === long ? 60 : 0]))
          const trimmed = after.find((d) => d.id === long)!.attempts.map((a) => a.status_code)
          expect(trimmed).toEqual(Array.from({ length: KEPT_ATTEMPTS }, (_, i) => 60 - KEPT_ATTEMPTS + 1 + i))

          // what the worker sends: the stored body, byte for byte
          const repo = yield* WebhooksRepo
          const now = new Date()
          const claimed = yield* repo.claim(now, {
            limit: 10,
            perEndpoint: 10,
            perCell: 10,
            leaseUntil: new Date(now.getTime() + 60_000),
            token: "t"
          })
          expect(claimed.map((d) => [d.id, d.body]).sort()).toEqual(before.map((d) => [d.id, d.body]))
        }).pipe(Effect.provide(WebhooksRepo.Default), Effect.provide(client))
      }).pipe(Effect.scoped),
    60_000
  )
})
