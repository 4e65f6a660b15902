/**
 * The delivery worker (D11, D18): one loop per process sends the outbox's due deliveries.
 *
 * - Claim: a short transaction leases due deliveries (`FOR UPDATE SKIP LOCKED`, so processes share
 *   the work; `WebhooksRepo.claim`), at most WEBHOOK_CONCURRENCY in flight in this process,
 *   WEBHOOK_ENDPOINT_CONCURRENCY per endpoint and WEBHOOK_CELL_CONCURRENCY per environment, taken
 *   in turns across environments (each one's first before any one's second), so a slow or dead
 *   endpoint, or an environment full of them, holds a few slots and never delays the others' first
 *   attempts (D20). No transaction is open during the HTTP call.
 * - Send, then record the attempt under the lease (`record`): success, or the next attempt per
 *   the retry schedule (src/Domain/Webhooks.ts), or `failed` after the last.
 * - A process that dies mid-attempt leaves its lease: once it runs out, any process claims the
 *   delivery again and records that attempt as an unknown outcome. So the one duplicate this design
 *   produces is a delivery sent again with the same `webhook-id` after an attempt whose outcome is
 *   unknown, as Standard Webhooks allows. A shutdown records its interrupted attempts the same way.
 * - Wake-ups: `LISTEN webhook_deliveries` (notified at the commit of each enqueued event or
 *   replay), each attempt's end, the next due time (a retry, a lease running out), and a slow
 *   poll (WEBHOOK_POLL_SECONDS) as the fallback. All times are Effect's Clock (TestClock in tests).
 */
import { randomUUID } from "node:crypto"

import { Clock, Duration, Effect, FiberSet, Layer, Queue, Redacted, Stream } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Secrets } from "../Crypto/Secrets.js"
import { Notifications } from "../Database/Listener.js"
import { afterAttempt, type WebhookAttempt } from "../Domain/Webhooks.js"
import { toIso } from "../Kernel/Ids.js"
import { cellKey } from "../Kernel/Principal.js"
import { realPause } from "../Kernel/RealTime.js"
import { asCell, sharedBy, Shares } from "../Kernel/Shares.js"
import { Destinations } from "../Outbound/Destinations.js"
import { type ClaimedRow, UNKNOWN_OUTCOME, WebhooksRepo } from "./Repo.js"
import { send } from "./Sender.js"

const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

const worker = Effect.gen(function*() {
  const config = (yield* AppConfig).webhooks
  const repo = yield* WebhooksRepo
  const secrets = yield* Secrets
  const { dispatcher } = yield* Destinations
  // (issue 36) an attempt waits for its environment's share of the node's calls out
  const shares = yield* Shares
  const callOut = sharedBy(shares, "outbound")
  const notifications = yield* Notifications
  const wake = yield* Queue.sliding<void>(1)
  const attempts = yield* FiberSet.make()
  let inFlight = 0

  // a notification, or LISTEN (re)connected (one may have been missed): look again
  yield* notifications.listen("webhook_deliveries").pipe(
    Stream.runForEach(() => Queue.offer(wake, undefined)),
    Effect.forkScoped
  )

  /** The secrets that sign now: the current one, and the previous one until its overlap ends. */
  const signingSecrets = (d: ClaimedRow, at: number) =>
    Effect.gen(function*() {
      const current = yield* secrets.decrypt({ ciphertext: d.secret_ciphertext, iv: d.secret_iv, tag: d.secret_tag }, d.endpoint_id)
      const keys = [Redacted.value(current)]
      if (
        d.previous_secret_expires_at !== null && d.previous_secret_expires_at.getTime() > at &&
        d.previous_secret_ciphertext !== null && d.previous_secret_iv !== null && d.previous_secret_tag !== null
      ) {
        const previous = yield* secrets.decrypt(
          { ciphertext: d.previous_secret_ciphertext, iv: d.previous_secret_iv, tag: d.previous_secret_tag },
          d.endpoint_id
        )
        keys.push(Redacted.value(previous))
      }
      return keys
    })

  /** Records how the attempt ended; a lost lease (another process took the delivery over) records nothing. */
  const record = (d: ClaimedRow, token: string, attempt: WebhookAttempt, ok: boolean) =>
    Effect.gen(function*() {
      const next = afterAttempt(d, ok, yield* now)
      const recorded = yield* repo.record(d.id, token, { attempt, ...next })
      if (!recorded) yield* Effect.logWarning("webhook attempt not recorded: its lease was taken over")
      else if (next.status === "failed") yield* Effect.logInfo("webhook delivery failed for good")
    })

  const deliver = (d: ClaimedRow, token: string) =>
    Effect.gen(function*() {
      const started = yield* Clock.currentTimeMillis
      const keys = yield* Effect.either(signingSecrets(d, started))
      if (keys._tag === "Left") {
        yield* Effect.logError("a webhook endpoint's secret does not decrypt with this SECRETS_KEY")
        return yield* record(d, token, {
          at: toIso(started),
          status_code: null,
          duration_ms: 0,
          error: "not sent: the endpoint's signing secret could not be read"
        }, false)
      }
      const { attempt, ok } = yield* callOut(send(dispatcher, { url: d.url, id: d.id, body: d.body, secrets: keys.right }))
      yield* record(d, token, attempt, ok)
    }).pipe(
      // Stopped mid-attempt (a shutdown): its outcome is unknown, recorded as such (best effort: the lease covers the rest).
      Effect.onInterrupt(() =>
        Effect.flatMap(
          now,
          (at) => record(d, token, { at: toIso(at), status_code: null, duration_ms: null, error: UNKNOWN_OUTCOME }, false)
        ).pipe(
          Effect.timeout("2 seconds"),
          Effect.ignore
        )
      ),
      Effect.catchAllCause((cause) => Effect.logWarning("webhook attempt failed to run; its lease will bring it back", cause)),
      // the attempt's work (its statements, its call out, its CPU) is its environment's
      asCell(shares, cellKey({ tenantId: d.tenant_id, environment: d.environment })),
      Effect.annotateLogs({ webhook_id: d.id, endpoint_id: d.endpoint_id, tenant_id: d.tenant_id })
    )

  /** Claims what is due, as far as this process has room, and starts each attempt. */
  const claimDue = Effect.gen(function*() {
    const free = config.concurrency - inFlight
    if (free <= 0) return
    const at = yield* Clock.currentTimeMillis
    const token = randomUUID()
    const claimed = yield* repo.claim(new Date(at), {
      limit: free,
      perEndpoint: config.endpointConcurrency,
      perCell: config.cellConcurrency,
      leaseUntil: new Date(at + config.leaseSeconds * 1000),
      token
    })
    for (const d of claimed) {
      inFlight++
      yield* FiberSet.run(
        attempts,
        deliver(d, token).pipe(Effect.ensuring(Effect.zipRight(Effect.sync(() => inFlight--), Queue.offer(wake, undefined))))
      )
    }
  })

  /**
   * Until the next due time, the fallback poll, or a wake-up (a notification, an attempt's end).
   * With nothing due the fallback look is in real time (`realPause`), not on the Clock: a suite
   * that moves TestClock by months does not wake an idle worker once per poll of those months.
   */
  const waitForWork = Effect.gen(function*() {
    const due = yield* repo.nextDue(new Date(yield* Clock.currentTimeMillis))
    const at = yield* Clock.currentTimeMillis // after the query: the wait starts now
    const poll = config.pollSeconds * 1000
    if (due === undefined) return yield* Effect.raceFirst(Queue.take(wake), realPause(poll))
    yield* Effect.raceFirst(Queue.take(wake), Effect.sleep(Duration.millis(Math.min(poll, Math.max(0, due.getTime() - at)))))
  })

  yield* Effect.zipRight(claimDue, waitForWork).pipe(
    Effect.catchAllCause((cause) =>
      Effect.zipRight(
        Effect.logWarning("webhook delivery pass failed", cause),
        Effect.sleep(Duration.seconds(Math.min(5, config.pollSeconds)))
      )
    ),
    Effect.forever,
    Effect.forkScoped
  )
})

/** The delivery worker of this process (every replica runs one); needs AppConfig and Notifications. */
export const WebhookWorkerLive = Layer.scopedDiscard(worker).pipe(
  Layer.provide([WebhooksRepo.Default, Secrets.Default, Destinations.Default])
)
