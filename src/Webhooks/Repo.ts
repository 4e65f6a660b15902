/**
 * SQL of webhook endpoints and deliveries (D11, D18): the outbox (migrations 0011, 0024). Rows
 * decoded; no service logic. `enqueue` announces an event in the caller's transaction (run events
 * are enqueued by a trigger on `run_events`): the event stored once (`webhook_events`), one small
 * row per delivery; `claim`, `record` and `nextDue` are the delivery worker's.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"
import { DeliveryStatus, KEPT_ATTEMPTS, WebhookEventType } from "../Domain/Webhooks.js"
import type { WebhookAttempt, WebhookEventType as EventType } from "../Domain/Webhooks.js"
import { EnvironmentName, toIso } from "../Kernel/Ids.js"
import type { CellRef } from "../Kernel/Principal.js"
import { countLevel, releaseLevel } from "../Quotas/Queries.js"

export const EndpointRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  url: Schema.String,
  description: Schema.NullOr(Schema.String),
  event_types: Schema.Array(WebhookEventType),
  enabled: Schema.Boolean,
  previous_secret_expires_at: Rows.TimeOrNull,
  created_at: Rows.Time,
  updated_at: Rows.Time
})
export type EndpointRow = typeof EndpointRow.Type

const AttemptRow = Schema.Struct({
  at: Schema.String,
  status_code: Schema.NullOr(Schema.Number),
  duration_ms: Schema.NullOr(Schema.Number),
  error: Schema.NullOr(Schema.String)
})

export const DeliveryRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  endpoint_id: Schema.String,
  event_id: Schema.String,
  event_type: WebhookEventType,
  status: DeliveryStatus,
  attempts: Schema.Array(AttemptRow),
  attempt_count: Schema.Number,
  failures: Schema.Number,
  replay: Schema.Boolean,
  next_attempt_at: Rows.TimeOrNull,
  lease_until: Rows.TimeOrNull,
  created_at: Rows.Time
})
export type DeliveryRow = typeof DeliveryRow.Type

/** A stored secret: AES-256-GCM ciphertext, IV and tag (src/Crypto/Secrets.ts). */
export interface SealedSecret {
  readonly ciphertext: Uint8Array
  readonly iv: Uint8Array
  readonly tag: Uint8Array
}

const NullableBytes = Schema.NullOr(Rows.Bytes)

/** A delivery the worker holds a lease on, with what sending it takes. */
export const ClaimedRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  environment: EnvironmentName,
  endpoint_id: Schema.String,
  event_type: Schema.String,
  /** the exact bytes signed and sent, built from the stored event when claimed */
  body: Schema.String,
  failures: Schema.Number,
  replay: Schema.Boolean,
  url: Schema.String,
  secret_ciphertext: Rows.Bytes,
  secret_iv: Rows.Bytes,
  secret_tag: Rows.Bytes,
  previous_secret_ciphertext: NullableBytes,
  previous_secret_iv: NullableBytes,
  previous_secret_tag: NullableBytes,
  previous_secret_expires_at: Rows.TimeOrNull
})
export type ClaimedRow = typeof ClaimedRow.Type

/** How an attempt ended, as the worker records it. */
export interface AttemptRecord {
  readonly attempt: WebhookAttempt
  readonly status: DeliveryStatus
  readonly failures: number
  readonly nextAttemptAt: Date | null
}

/** The error of an attempt found unrecorded when its lease ran out (the process sending it stopped). */
export const UNKNOWN_OUTCOME = "outcome unknown: the process sending this attempt stopped before recording its answer"

const ENDPOINT_COLUMNS = `id, tenant_id, environment, url, description, event_types, enabled, previous_secret_expires_at,
                          created_at, updated_at`

/** An environment's webhook deliveries waiting to be sent. */
export const BacklogRow = Schema.Struct({
  tenant_id: Schema.String,
  environment: Schema.String,
  pending: Schema.Number,
  oldest_due: Rows.TimeOrNull
})
export type BacklogRow = typeof BacklogRow.Type

export class WebhooksRepo extends Effect.Service<WebhooksRepo>()("WebhooksRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const endpointColumns = sql.literal(ENDPOINT_COLUMNS)
    const inCell = (cell: CellRef) => sql`tenant_id = ${cell.tenantId} AND environment = ${cell.environment}`

    // ---- endpoints ---------------------------------------------------------------------------
    /**
     * The endpoint, counted in the cell's `webhook_endpoints` quota in the same statement, only
     * while the count stays within `limit` (D20): undefined, and nothing written, past it.
     */
    const insertEndpoint = (e: {
      id: string
      cell: CellRef
      url: string
      description: string | null
      eventTypes: ReadonlyArray<string>
      secret: SealedSecret
      keyId: string
      at: Date
    }, limit: number) =>
      sql`WITH counted AS (${countLevel(sql, e.cell, "webhook_endpoints", limit, sql`(VALUES (1)) AS endpoint (n)`)})
          INSERT INTO webhook_endpoints (id, tenant_id, environment, url, description, event_types, enabled,
                                         secret_ciphertext, secret_iv, secret_tag, created_by_key_id, created_at, updated_at)
          SELECT ${e.id}, ${e.cell.tenantId}, ${e.cell.environment}, ${e.url}, ${e.description},
                 ${[...e.eventTypes] as Array<string>}::text[], true, ${e.secret.ciphertext}, ${e.secret.iv}, ${e.secret.tag},
                 ${e.keyId}, ${e.at}, ${e.at}
          WHERE EXISTS (SELECT 1 FROM counted)
          RETURNING ${endpointColumns}`.pipe(Rows.maybe(EndpointRow))

    const endpoint = (cell: CellRef, id: string) =>
      sql`SELECT ${endpointColumns} FROM webhook_endpoints WHERE id = ${id} AND ${inCell(cell)}`.pipe(Rows.maybe(EndpointRow))

    const endpoints = (tenantId: string, environment: string, after: string | undefined, limit: number) =>
      sql`SELECT ${endpointColumns} FROM webhook_endpoints WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(EndpointRow))

    /** Sets the given fields; undefined when the endpoint is not the cell's. */
    const updateEndpoint = (
      cell: CellRef,
      id: string,
      patch: {
        readonly url?: string | undefined
        readonly eventTypes?: ReadonlyArray<string> | undefined
        readonly enabled?: boolean | undefined
        readonly description?: string | null | undefined
      },
      at: Date
    ) =>
      sql`UPDATE webhook_endpoints SET
            url = ${patch.url ?? sql`url`},
            event_types = ${patch.eventTypes === undefined ? sql`event_types` : sql`${[...patch.eventTypes] as Array<string>}::text[]`},
            enabled = ${patch.enabled ?? sql`enabled`},
            description = ${patch.description === undefined ? sql`description` : patch.description},
            updated_at = ${at}
          WHERE id = ${id} AND ${inCell(cell)}
          RETURNING ${endpointColumns}`.pipe(Rows.maybe(EndpointRow))

    /** The new secret signs from now on; the current one becomes the previous, signing too until `previousUntil`. */
    const rotateSecret = (cell: CellRef, id: string, secret: SealedSecret, previousUntil: Date, at: Date) =>
      sql`UPDATE webhook_endpoints SET
            previous_secret_ciphertext = secret_ciphertext, previous_secret_iv = secret_iv, previous_secret_tag = secret_tag,
            previous_secret_expires_at = ${previousUntil},
            secret_ciphertext = ${secret.ciphertext}, secret_iv = ${secret.iv}, secret_tag = ${secret.tag},
            updated_at = ${at}
          WHERE id = ${id} AND ${inCell(cell)}
          RETURNING ${endpointColumns}`.pipe(Rows.maybe(EndpointRow))

    /**
     * Deletes the endpoint and its deliveries (cascade), the events no other endpoint's delivery
     * refers to, and gives its place back to the cell's `webhook_endpoints` quota; false when it is
     * not the cell's.
     */
    const deleteEndpoint = (cell: CellRef, id: string) =>
      sql`WITH deleted AS (
            DELETE FROM webhook_endpoints WHERE id = ${id} AND ${inCell(cell)} RETURNING id
          ), released AS (${releaseLevel(sql, cell, "webhook_endpoints", sql`deleted`)}),
          orphaned AS (
            DELETE FROM webhook_events ev
            WHERE ev.id IN (SELECT d.event_id FROM webhook_deliveries d WHERE d.endpoint_id IN (SELECT id FROM deleted))
              AND NOT EXISTS (SELECT 1 FROM webhook_deliveries o WHERE o.event_id = ev.id AND o.endpoint_id <> ${id})
          )
          SELECT id FROM deleted`.pipe(
        Rows.all(Schema.Struct({ id: Schema.String })),
        Effect.map((rows) => rows.length > 0)
      )

    // ---- deliveries ----------------------------------------------------------------------------
    const deliveryColumns = sql.literal(
      `id, tenant_id, environment, endpoint_id, event_id, event_type, status, attempts, attempt_count, failures, replay,
       next_attempt_at, lease_until, created_at`
    )

    const delivery = (cell: CellRef, id: string) =>
      sql`SELECT ${deliveryColumns} FROM webhook_deliveries WHERE id = ${id} AND ${inCell(cell)}`.pipe(Rows.maybe(DeliveryRow))

    const deliveries = (
      tenantId: string,
      environment: string,
      after: string | undefined,
      limit: number,
      filter: { readonly endpoint_id?: string | undefined; readonly status?: string | undefined }
    ) =>
      sql`SELECT ${deliveryColumns} FROM webhook_deliveries WHERE tenant_id = ${tenantId} AND environment = ${environment}
          ${filter.endpoint_id === undefined ? sql`` : sql`AND endpoint_id = ${filter.endpoint_id}`}
          ${filter.status === undefined ? sql`` : sql`AND status = ${filter.status}`}
          ${after === undefined ? sql`` : sql`AND id < ${after}`}
          ORDER BY id DESC LIMIT ${limit + 1}`.pipe(Rows.all(DeliveryRow))

    /**
     * A new attempt of the delivery as soon as possible (replay, D11): due now, `pending`. A
     * finished delivery's replay is one attempt (`replay`: it is not retried); a pending one's next
     * attempt is brought forward. Undefined while an attempt is in flight (a live lease).
     */
    const replay = (cell: CellRef, id: string, at: Date) =>
      Effect.tap(
        sql`UPDATE webhook_deliveries SET replay = (status <> 'pending'), status = 'pending', next_attempt_at = ${at}
            WHERE id = ${id} AND ${inCell(cell)} AND (lease_until IS NULL OR lease_until <= ${at})
            RETURNING ${deliveryColumns}`.pipe(Rows.maybe(DeliveryRow)),
        (row) => (row === undefined ? Effect.void : sql`SELECT pg_notify('webhook_deliveries', 'due')`)
      )

    /**
     * Announces an event in the caller's transaction: the event stored once (`data` as given) and
     * one delivery per enabled endpoint of the cell subscribed to its type, and a notification at
     * commit; nothing when no endpoint subscribes.
     */
    const enqueue = (event: {
      readonly cell: CellRef
      readonly type: EventType
      readonly eventId: string
      readonly at: Date
      readonly data: unknown
    }) =>
      sql`SELECT webhook_enqueue(${event.cell.tenantId}, ${event.cell.environment}, ${event.type}, ${event.eventId},
                                 ${event.at}, ${JSON.stringify(event.data)}::json)`.pipe(Rows.none)

    // ---- the worker -----------------------------------------------------------------------------
    /**
     * Leases up to `limit` due deliveries of enabled endpoints (`FOR UPDATE SKIP LOCKED`: processes
     * share the work), fairly across cells (D20): at most `perEndpoint` in flight per endpoint and
     * `perCell` per cell (environment), counting every live lease, taken in turns: each cell's
     * first delivery before any cell's second (fewest in flight first), and within a cell each
     * endpoint's before any endpoint's second, oldest first within a turn. So one cell's backlog
     * of slow or failing endpoints holds at most `perCell` of the slots and waits behind the others'
     * first attempts.
     *
     * It reads per endpoint, never the whole backlog (indexes of migration 0024): the endpoints
     * with pending deliveries by a loose index scan of `webhook_deliveries_pending` (one descent
     * each), then each one's oldest due deliveries up to its room (a range scan that stops there),
     * and the live leases from `webhook_deliveries_leased`.
     *
     * A delivery whose lease ran out unrecorded gets that attempt recorded as an unknown outcome (a
     * failure) as it is claimed again. The body is built from the stored event: the expression
     * `webhook_enqueue` stored bodies with before migration 0024, so the same bytes.
     */
    const claim = (
      at: Date,
      options: { limit: number; perEndpoint: number; perCell: number; leaseUntil: Date; token: string }
    ) =>
      sql`
        WITH RECURSIVE busy (endpoint_id) AS (
          (SELECT endpoint_id FROM webhook_deliveries WHERE status = 'pending' ORDER BY endpoint_id LIMIT 1)
          UNION ALL
          SELECT (SELECT d.endpoint_id FROM webhook_deliveries d
                  WHERE d.status = 'pending' AND d.endpoint_id > busy.endpoint_id ORDER BY d.endpoint_id LIMIT 1)
          FROM busy WHERE busy.endpoint_id IS NOT NULL
        ), leased AS (
          SELECT endpoint_id, tenant_id, environment FROM webhook_deliveries WHERE lease_until > ${at}
        ), endpoint_load AS (
          SELECT endpoint_id, count(*) AS n FROM leased GROUP BY endpoint_id
        ), cell_load AS (
          SELECT tenant_id, environment, count(*) AS n FROM leased GROUP BY tenant_id, environment
        ), candidates AS (
          SELECT due.id, e.tenant_id, e.environment, due.next_attempt_at,
                 COALESCE(l.n, 0) + row_number() OVER (PARTITION BY e.id ORDER BY due.next_attempt_at, due.id) AS endpoint_turn
          FROM busy
          JOIN webhook_endpoints e ON e.id = busy.endpoint_id AND e.enabled
          LEFT JOIN endpoint_load l ON l.endpoint_id = e.id
          CROSS JOIN LATERAL (
            SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
            WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= ${at}
              AND (d.lease_until IS NULL OR d.lease_until <= ${at})
            ORDER BY d.next_attempt_at, d.id
            LIMIT GREATEST(${options.perEndpoint} - COALESCE(l.n, 0), 0)
          ) due
        ), turns AS (
          SELECT c.id, c.next_attempt_at,
                 COALESCE(l.n, 0) + row_number() OVER (
                   PARTITION BY c.tenant_id, c.environment ORDER BY c.endpoint_turn, c.next_attempt_at, c.id) AS turn
          FROM candidates c
          LEFT JOIN cell_load l ON l.tenant_id = c.tenant_id AND l.environment = c.environment
        ), picked AS (
          SELECT id FROM turns WHERE turn <= ${options.perCell} ORDER BY turn, next_attempt_at, id LIMIT ${options.limit}
        ), claimed AS (
          SELECT d.id, d.leased_at AS unrecorded_at FROM webhook_deliveries d
          WHERE d.id IN (SELECT id FROM picked) AND d.status = 'pending'
            AND (d.lease_until IS NULL OR d.lease_until <= ${at})
          FOR UPDATE SKIP LOCKED
        )
        UPDATE webhook_deliveries d SET
          lease_token = ${options.token}, leased_at = ${at}, lease_until = ${options.leaseUntil},
          attempts = CASE WHEN claimed.unrecorded_at IS NULL THEN d.attempts ELSE webhook_last_attempts(d.attempts || jsonb_build_array(
            jsonb_build_object('at', webhook_time(claimed.unrecorded_at), 'status_code', NULL, 'duration_ms', NULL,
                               'error', ${UNKNOWN_OUTCOME}::text)), ${KEPT_ATTEMPTS}) END,
          attempt_count = d.attempt_count + CASE WHEN claimed.unrecorded_at IS NULL THEN 0 ELSE 1 END,
          failures = d.failures + CASE WHEN claimed.unrecorded_at IS NULL THEN 0 ELSE 1 END
        FROM claimed, webhook_endpoints e, webhook_events ev
        WHERE d.id = claimed.id AND e.id = d.endpoint_id AND ev.id = d.event_id
        RETURNING d.id, d.tenant_id, d.environment, d.endpoint_id, d.event_type,
                  json_build_object('id', d.id, 'type', ev.type, 'created_at', webhook_time(ev.created_at),
                                    'tenant_id', ev.tenant_id, 'environment', ev.environment, 'data', ev.data)::text AS body,
                  d.failures, d.replay, e.url, e.secret_ciphertext, e.secret_iv, e.secret_tag, e.previous_secret_ciphertext,
                  e.previous_secret_iv, e.previous_secret_tag, e.previous_secret_expires_at`.pipe(Rows.all(ClaimedRow))

    /**
     * Records an attempt and what follows, if the lease `token` is still the delivery's (else
     * false): the attempt appended, the oldest dropped past KEPT_ATTEMPTS, `attempt_count` + 1.
     */
    const record = (id: string, token: string, r: AttemptRecord) =>
      sql`UPDATE webhook_deliveries SET
            attempts = webhook_last_attempts(attempts || ${JSON.stringify([r.attempt])}::jsonb, ${KEPT_ATTEMPTS}),
            attempt_count = attempt_count + 1,
            status = ${r.status}, failures = ${r.failures}, replay = false, next_attempt_at = ${r.nextAttemptAt},
            lease_token = NULL, leased_at = NULL, lease_until = NULL
          WHERE id = ${id} AND lease_token = ${token}
          RETURNING id`.pipe(
        Rows.all(Schema.Struct({ id: Schema.String })),
        Effect.map((rows) => rows.length > 0)
      )

    /**
     * The next time after `at` a pending delivery becomes due: its next attempt, or its lease
     * running out (a leased delivery's next attempt is never later than its lease). Two index
     * reads (`webhook_deliveries_due`, `webhook_deliveries_leased`).
     */
    const nextDue = (at: Date) =>
      sql`SELECT LEAST(
            (SELECT min(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at > ${at}),
            (SELECT min(lease_until) FROM webhook_deliveries WHERE lease_until > ${at})) AS due`.pipe(
        Rows.single(Schema.Struct({ due: Rows.TimeOrNull })),
        Effect.map((r) => r.due ?? undefined)
      )

    /**
     * The deliveries waiting to be sent, per environment (the most first, at most `limit`), and
     * when the oldest became due: the operator console's backlog (issue 39).
     */
    const backlog = (limit: number) =>
      sql`SELECT tenant_id, environment, count(*)::int AS pending, min(next_attempt_at) AS oldest_due
          FROM webhook_deliveries WHERE status = 'pending'
          GROUP BY tenant_id, environment ORDER BY pending DESC, tenant_id, environment LIMIT ${limit}`.pipe(
        Rows.all(BacklogRow)
      )

    return {
      backlog,
      insertEndpoint,
      endpoint,
      endpoints,
      updateEndpoint,
      rotateSecret,
      deleteEndpoint,
      delivery,
      deliveries,
      replay,
      enqueue,
      claim,
      record,
      nextDue
    } as const
  })
}) {}

// ---- the resources rows become -------------------------------------------------------------------

export const toEndpoint = (r: EndpointRow) => ({
  id: r.id,
  object: "webhook_endpoint" as const,
  url: r.url,
  event_types: r.event_types,
  description: r.description,
  enabled: r.enabled,
  previous_secret_expires_at: r.previous_secret_expires_at === null ? null : toIso(r.previous_secret_expires_at),
  created_at: toIso(r.created_at),
  updated_at: toIso(r.updated_at)
})

export const toDelivery = (r: DeliveryRow) => ({
  id: r.id,
  object: "webhook_delivery" as const,
  endpoint_id: r.endpoint_id,
  event_id: r.event_id,
  event_type: r.event_type,
  status: r.status,
  attempts: r.attempts,
  attempt_count: r.attempt_count,
  next_attempt_at: r.next_attempt_at === null ? null : toIso(r.next_attempt_at),
  created_at: toIso(r.created_at)
})
