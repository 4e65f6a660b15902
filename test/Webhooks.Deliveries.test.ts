/**
 * Webhook deliveries end to end (D11, D18) against real receivers on 127.0.0.1, every delivery
 * verified with the `standardwebhooks` package: a run's terminal event delivered once; a 500 then a
 * 200 five seconds later by the schedule, same `webhook-id`; a redirect is a failed attempt and is
 * not followed; replay; secret rotation (both signatures during the overlap, only the new one
 * after 24 h); the whole retry schedule to `failed`; an uncommitted event never sent; a slow
 * endpoint not delaying another; D20: an event stored once for its deliveries, an environment's
 * hanging endpoints not delaying another environment's first attempt, the last 50 attempts kept
 * and `attempt_count`. Time is TestClock's, and the retry schedule is proved on it.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Exit, Fiber, TestClock } from "effect"
import { afterAttempt, retryDelay, RetrySchedule } from "../src/Domain/Webhooks.js"
import { verifyWebhook } from "../src/ToolServer/index.js"
import { makeTestApp } from "./support/App.js"
import { expectErrorCode, expectSingle } from "./support/Envelopes.js"
import { realSleep, settle } from "./support/Waiting.js"
import { type Receiver, startReceiver, verifies, verify } from "./support/WebhookReceiver.js"
import { waitFor, webhookSandbox, webhookSettings } from "./support/WebhookSandbox.js"

/** D20: a delivery keeps its last 50 attempts. */
const KEPT_ATTEMPTS = 50

/** Runs `body` against a fresh app on TestClock set to now (webhook timestamps then verify as sent). */
const withApp = <A, E>(body: Effect.Effect<A, E, any>, webhooks: Parameters<typeof webhookSettings>[0] = {}) =>
  Effect.gen(function*() {
    yield* TestClock.setTime(Date.now())
    yield* body.pipe(Effect.scoped, Effect.provide(makeTestApp(webhookSettings(webhooks))))
  })

const count = (r: Receiver) => Effect.sync(() => r.received.length)
/** Real IO settles a few times: what was going to arrive has. */
const quiet = Effect.repeatN(settle, 5)
const SCHEDULE_SECONDS = [5, 300, 1800, 7200, 18_000, 36_000, 36_000]

describe("the retry schedule", () => {
  it.effect("is an Effect Schedule: retried at 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then given up (TestClock)", () =>
    Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      const at: Array<number> = []
      const attempt = Effect.flatMap(Clock.currentTimeMillis, (now) => {
        at.push(now - start)
        return Effect.fail("the endpoint answered 500")
      })
      const fiber = yield* Effect.fork(Effect.retry(attempt, RetrySchedule))
      for (const seconds of SCHEDULE_SECONDS) {
        yield* TestClock.adjust(Duration.seconds(seconds - 1))
        const before = at.length
        yield* TestClock.adjust("1 second")
        expect(at.length).toBe(before + 1)
      }
      expect(Exit.isFailure(yield* Fiber.await(fiber))).toBe(true)
      let sum = 0
      expect(at).toEqual([0, ...SCHEDULE_SECONDS.map((s) => (sum += s * 1000))])
      // what the worker reads from it, one stored attempt at a time
      expect(SCHEDULE_SECONDS.map((_, i) => Duration.toSeconds(retryDelay(i + 1)!))).toEqual(SCHEDULE_SECONDS)
      expect(retryDelay(8)).toBeUndefined()
      const t = new Date(0)
      expect(afterAttempt({ failures: 0, replay: false }, false, t)).toEqual({
        status: "pending",
        failures: 1,
        nextAttemptAt: new Date(5000)
      })
      expect(afterAttempt({ failures: 7, replay: false }, false, t)).toEqual({ status: "failed", failures: 8, nextAttemptAt: null })
      expect(afterAttempt({ failures: 0, replay: true }, false, t)).toEqual({ status: "failed", failures: 1, nextAttemptAt: null })
      expect(afterAttempt({ failures: 3, replay: false }, true, t)).toEqual({ status: "succeeded", failures: 3, nextAttemptAt: null })
    }))
})

describe("webhook deliveries (TestClock)", () => {
  it.effect("a run's terminal event is delivered once, signed; the body is the D8 event", () =>
    withApp(Effect.gen(function*() {
      const receiver = yield* startReceiver()
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
      const runId = yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 1)
      yield* quiet
      expect(receiver.received).toHaveLength(1)
      const [got] = receiver.received
      const body = yield* verify(endpoint.secret, got!)
      const event = (yield* s.events(runId)).items.find((e) => e.type === "run.succeeded")
      expect(body).toEqual({
        id: got!.headers["webhook-id"],
        type: "run.succeeded",
        created_at: event.created_at,
        tenant_id: s.tenantId,
        environment: "sandbox",
        data: event
      })
      // the tool SDK's helper verifies it too (the clock has not moved since it was sent)
      expect(yield* verifyWebhook({ secrets: endpoint.secret, headers: got!.headers, rawBody: got!.body })).toEqual(body)
      expect(got!.headers["webhook-id"]).toMatch(/^msg_[0-9a-z]{26}$/)
      expect(got!.headers["content-type"]).toBe("application/json")
      expect(got!.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
      expect(Number(got!.headers["webhook-timestamp"])).toBe(Math.floor((yield* Clock.currentTimeMillis) / 1000))
      const delivery = yield* s.delivery(got!.headers["webhook-id"]!)
      expect(delivery).toMatchObject({
        id: got!.headers["webhook-id"],
        object: "webhook_delivery",
        endpoint_id: endpoint.id,
        event_id: event.id,
        event_type: "run.succeeded",
        status: "succeeded",
        next_attempt_at: null
      })
      expect(delivery.attempts).toEqual([{ at: expect.any(String), status_code: 200, duration_ms: expect.any(Number), error: null }])
      // nothing for the run's other events: the endpoint did not subscribe to them
      expect(yield* s.deliveries()).toHaveLength(1)
    })))

  it.effect("a 500, then a 200 five seconds later (the schedule), with the same webhook-id", () =>
    withApp(Effect.gen(function*() {
      const receiver = yield* startReceiver()
      receiver.script.push(500)
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
      yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 1)
      const id = receiver.received[0]!.headers["webhook-id"]!
      const first = yield* waitFor(s.delivery(id), (d) => d.attempts.length === 1)
      expect(first).toMatchObject({ status: "pending", attempts: [{ status_code: 500, error: "the endpoint answered 500" }] })
      expect(Date.parse(first.next_attempt_at) - Date.parse(first.attempts[0].at)).toBe(5000)
      yield* TestClock.adjust("4 seconds")
      yield* quiet
      expect(receiver.received).toHaveLength(1)
      yield* TestClock.adjust("1 second")
      yield* waitFor(count(receiver), (n) => n >= 2)
      const second = receiver.received[1]!
      expect(second.headers["webhook-id"]).toBe(id)
      expect(second.body).toBe(receiver.received[0]!.body)
      expect(Number(second.headers["webhook-timestamp"]) - Number(receiver.received[0]!.headers["webhook-timestamp"])).toBe(5)
      for (const got of receiver.received) expect((yield* verify(endpoint.secret, got)).id).toBe(id)
      const done = yield* waitFor(s.delivery(id), (d) => d.status !== "pending")
      expect(done).toMatchObject({ status: "succeeded", next_attempt_at: null })
      expect(done.attempts.map((a: any) => a.status_code)).toEqual([500, 200])
      yield* quiet
      expect(receiver.received).toHaveLength(2)
    })))

  it.effect("a redirect is a failed attempt and is not followed: its target receives nothing", () =>
    withApp(Effect.gen(function*() {
      const target = yield* startReceiver()
      const receiver = yield* startReceiver({ redirect: target.url })
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
      yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 1)
      yield* verify(endpoint.secret, receiver.received[0]!)
      const id = receiver.received[0]!.headers["webhook-id"]!
      const delivery = yield* waitFor(s.delivery(id), (d) => d.attempts.length === 1)
      expect(delivery.status).toBe("pending")
      expect(delivery.attempts[0].status_code).toBe(302)
      expect(delivery.attempts[0].error).toContain("redirect")
      yield* quiet
      expect(target.received).toHaveLength(0)
    })))

  it.effect("replay: a new attempt of the same delivery, same webhook-id and body; its retry replays the 202", () =>
    withApp(Effect.gen(function*() {
      const receiver = yield* startReceiver()
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
      yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 1)
      const id = receiver.received[0]!.headers["webhook-id"]!
      yield* waitFor(s.delivery(id), (d) => d.status === "succeeded")
      const replayed = yield* s.hooks("POST", `/webhook-deliveries/${id}/replay`, undefined, "replay-1")
      const accepted = expectSingle(replayed, 202)
      expect(accepted).toMatchObject({ id, status: "pending" })
      expect(replayed.headers.get("location")).toBe(`${s.P}/webhook-deliveries/${id}`)
      yield* waitFor(count(receiver), (n) => n >= 2)
      const again = receiver.received[1]!
      expect(again.headers["webhook-id"]).toBe(id)
      expect(again.body).toBe(receiver.received[0]!.body)
      expect((yield* verify(endpoint.secret, again)).id).toBe(id)
      const done = yield* waitFor(s.delivery(id), (d) => d.attempts.length === 2)
      expect(done).toMatchObject({ status: "succeeded", next_attempt_at: null })
      expect(done.attempts.map((a: any) => a.status_code)).toEqual([200, 200])
      // the same request again is its stored answer, not a third attempt
      const retried = yield* s.hooks("POST", `/webhook-deliveries/${id}/replay`, undefined, "replay-1")
      expect(retried.status).toBe(202)
      expect(retried.headers.get("idempotent-replayed")).toBe("true")
      yield* quiet
      expect(receiver.received).toHaveLength(2)
      expectErrorCode(yield* s.hooks("POST", "/webhook-deliveries/msg_nope/replay"), 404, "resource_missing")
      // a replay that fails is one attempt: the delivery is then failed, not retried
      receiver.otherwise = 503
      expectSingle(yield* s.hooks("POST", `/webhook-deliveries/${id}/replay`), 202)
      const failed = yield* waitFor(s.delivery(id), (d) => d.attempts.length === 3)
      expect(failed).toMatchObject({ status: "failed", next_attempt_at: null })
    })))

  it.effect("rotation: during 24 h both signatures verify, after it only the new secret's", () =>
    withApp(Effect.gen(function*() {
      const receiver = yield* startReceiver()
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
      const rotated = expectSingle(yield* s.hooks("POST", `/webhook-endpoints/${endpoint.id}/rotate-secret`))
      expect(rotated.secret).toMatch(/^whsec_/)
      expect(rotated.secret).not.toBe(endpoint.secret)
      expect(Date.parse(rotated.previous_secret_expires_at) - (yield* Clock.currentTimeMillis)).toBe(24 * 3600 * 1000)

      yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 1)
      const during = receiver.received[0]!
      expect(during.headers["webhook-signature"]!.split(" ")).toHaveLength(2)
      expect(yield* verifies(endpoint.secret, during)).toBe(true)
      expect(yield* verifies(rotated.secret, during)).toBe(true)

      yield* TestClock.adjust("24 hours")
      yield* TestClock.adjust("1 second")
      yield* s.finishedRun()
      yield* waitFor(count(receiver), (n) => n >= 2)
      const after = receiver.received[1]!
      expect(after.headers["webhook-signature"]!.split(" ")).toHaveLength(1)
      expect(yield* verifies(rotated.secret, after)).toBe(true)
      expect(yield* verifies(endpoint.secret, after)).toBe(false)
    })))

  it.effect(
    "a receiver that always fails: attempts at 0, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then failed",
    () =>
      withApp(Effect.gen(function*() {
        const receiver = yield* startReceiver(500)
        const s = yield* webhookSandbox()
        const endpoint = yield* s.createEndpoint(receiver.url, ["run.succeeded"])
        yield* s.finishedRun()
        yield* waitFor(count(receiver), (n) => n >= 1)
        const id = receiver.received[0]!.headers["webhook-id"]!
        for (const [i, seconds] of SCHEDULE_SECONDS.entries()) {
          yield* waitFor(s.delivery(id), (d) => d.attempts.length === i + 1)
          yield* verify(endpoint.secret, receiver.received[i]!)
          yield* TestClock.adjust(Duration.seconds(seconds - 1))
          yield* quiet
          expect(receiver.received, `attempt ${i + 2} comes ${seconds} s after attempt ${i + 1}`).toHaveLength(i + 1)
          yield* TestClock.adjust("1 second")
          yield* waitFor(count(receiver), (n) => n >= i + 2)
        }
        yield* verify(endpoint.secret, receiver.received[7]!)
        const failed = yield* waitFor(s.delivery(id), (d) => d.status !== "pending")
        expect(failed).toMatchObject({ status: "failed", next_attempt_at: null })
        expect(failed.attempts).toHaveLength(8)
        expect(new Set(receiver.received.map((r) => r.headers["webhook-id"]))).toEqual(new Set([id]))
        const gaps = failed.attempts.slice(1).map((a: any, i: number) => (Date.parse(a.at) - Date.parse(failed.attempts[i].at)) / 1000)
        expect(gaps).toEqual(SCHEDULE_SECONDS)
        yield* TestClock.adjust("10 hours")
        yield* quiet
        expect(receiver.received).toHaveLength(8)
        expect(yield* s.deliveries(`?status=failed&endpoint_id=${endpoint.id}`)).toHaveLength(1)
        expect(yield* s.deliveries("?status=pending")).toHaveLength(0)
      })),
    120_000
  )

  it.effect("an event whose transaction does not commit is never delivered", () =>
    withApp(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* startReceiver()
      const s = yield* webhookSandbox()
      const endpoint = yield* s.createEndpoint(receiver.url, ["run.reconciled"])
      const runId = yield* s.finishedRun()
      const [run] = yield* sql<{ last_sequence: number }>`SELECT last_sequence FROM runs WHERE id = ${runId}`
      const at = new Date(yield* Clock.currentTimeMillis)
      const insert = (id: string) =>
        sql`INSERT INTO run_events (run_id, sequence, id, type, data, created_at)
            VALUES (${runId}, ${run!.last_sequence + 1}, ${id}, 'run.reconciled', '{"status":"succeeded"}'::jsonb, ${at})`
      const deliveriesOf = (id: string) =>
        Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE event_id = ${id}`, (r) => r[0]!.n)

      const rolledBack = yield* sql.withTransaction(Effect.gen(function*() {
        yield* insert("evt_uncommitted")
        expect(yield* deliveriesOf("evt_uncommitted")).toBe(1) // written with the event, in its transaction
        for (let i = 0; i < 5; i++) {
          yield* TestClock.adjust("10 seconds")
          yield* settle
        }
        expect(receiver.received).toHaveLength(0) // invisible to the workers while uncommitted
        return yield* Effect.fail("roll back")
      })).pipe(Effect.flip)
      expect(rolledBack).toBe("roll back")
      expect(yield* deliveriesOf("evt_uncommitted")).toBe(0)
      yield* TestClock.adjust("1 minute")
      yield* quiet
      expect(receiver.received).toHaveLength(0)

      // the same event committed is delivered
      yield* insert("evt_committed")
      yield* waitFor(count(receiver), (n) => n >= 1)
      expect((yield* verify(endpoint.secret, receiver.received[0]!)).data.id).toBe("evt_committed")
      yield* quiet
      expect(receiver.received).toHaveLength(1)
    })))

  it.effect("a slow endpoint does not delay another: it holds at most its share of the workers", () =>
    withApp(
      Effect.gen(function*() {
        const slow = yield* startReceiver("hang")
        const fast = yield* startReceiver()
        const s = yield* webhookSandbox()
        const slowEndpoint = yield* s.createEndpoint(slow.url, ["run.succeeded"])
        const fastEndpoint = yield* s.createEndpoint(fast.url, ["run.succeeded"])
        for (let i = 0; i < 3; i++) yield* s.finishedRun(`run ${i}`)
        yield* waitFor(count(fast), (n) => n >= 3)
        for (const got of fast.received) yield* verify(fastEndpoint.secret, got)
        yield* waitFor(Effect.sync(() => slow.hanging()), (n) => n >= 2)
        yield* quiet
        // two in flight to the slow endpoint (its limit), the third waits; the fast one got all three
        expect(slow.received).toHaveLength(2)
        expect(fast.received).toHaveLength(3)
        // 15 s without an answer: failed attempts, retried after 5 s; the third is sent meanwhile
        slow.otherwise = 200
        yield* TestClock.adjust("15 seconds")
        yield* waitFor(count(slow), (n) => n >= 3)
        const slowOnes = yield* s.deliveries(`?endpoint_id=${slowEndpoint.id}`)
        const timedOut = slowOnes.filter((d) => d.attempts[0]?.error === "no answer within 15 s")
        expect(timedOut).toHaveLength(2)
        for (const d of timedOut) expect(d).toMatchObject({ status: "pending", attempts: [{ status_code: null }] })
        yield* TestClock.adjust("5 seconds")
        yield* waitFor(count(slow), (n) => n >= 5)
        for (const got of slow.received) yield* verify(slowEndpoint.secret, got)
        const settled = yield* waitFor(
          s.deliveries(`?endpoint_id=${slowEndpoint.id}`),
          (ds) => ds.every((d) => d.status === "succeeded")
        )
        expect(settled).toHaveLength(3)
      }),
      { concurrency: 4, endpointConcurrency: 2 }
    ))

  it.effect("an event is stored once for its endpoints: each delivery refers to it, its body built when sent with its own id", () =>
    withApp(Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const receivers = [yield* startReceiver(), yield* startReceiver(), yield* startReceiver()]
      const s = yield* webhookSandbox()
      const endpoints = yield* Effect.forEach(receivers, (r) => s.createEndpoint(r.url, ["run.succeeded"]))
      const runId = yield* s.finishedRun()
      for (const r of receivers) yield* waitFor(count(r), (n) => n >= 1)
      const event = (yield* s.events(runId)).items.find((e) => e.type === "run.succeeded")
      const stored = () =>
        sql<{ id: string; deliveries: number }>`
          SELECT ev.id, (SELECT count(*)::int FROM webhook_deliveries d WHERE d.event_id = ev.id) AS deliveries
          FROM webhook_events ev WHERE ev.tenant_id = ${s.tenantId}`
      expect(yield* stored()).toEqual([{ id: event.id, deliveries: 3 }])
      const columns = yield* sql<{ name: string }>`
        SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'webhook_deliveries'`
      expect(columns.map((c) => c.name)).not.toContain("body")
      const ids = new Set<string>()
      for (const [i, r] of receivers.entries()) {
        const got = r.received[0]!
        const id = got.headers["webhook-id"]!
        ids.add(id)
        expect(yield* verify(endpoints[i]!.secret, got)).toEqual({
          id,
          type: "run.succeeded",
          created_at: event.created_at,
          tenant_id: s.tenantId,
          environment: "sandbox",
          data: event
        })
        // the same bytes but for the message id
        expect(got.body.replace(id, "msg_")).toBe(
          receivers[0]!.received[0]!.body.replace(receivers[0]!.received[0]!.headers["webhook-id"]!, "msg_")
        )
      }
      expect(ids.size).toBe(3)
      // deleting an endpoint deletes its deliveries; the event goes with the last one referring to it
      expectSingle(yield* s.hooks("DELETE", `/webhook-endpoints/${endpoints[0]!.id}`))
      expect(yield* stored()).toEqual([{ id: event.id, deliveries: 2 }])
      for (const e of endpoints.slice(1)) expectSingle(yield* s.hooks("DELETE", `/webhook-endpoints/${e.id}`))
      expect(yield* stored()).toEqual([])
    })))

  it.effect(
    "one environment's hanging endpoints and backlog do not delay another environment's first attempt (D20: within 5 s)",
    () =>
      withApp(
        Effect.gen(function*() {
          const hanging = yield* startReceiver("hang")
          const fast = yield* startReceiver()
          const a = yield* webhookSandbox()
          for (let i = 0; i < 3; i++) yield* a.createEndpoint(`${hanging.url}?endpoint=${i}`, ["run.succeeded"])
          for (let i = 0; i < 3; i++) yield* a.finishedRun(`run ${i}`)
          // nine deliveries due in A, each endpoint could take two of the process's four slots
          yield* waitFor(Effect.sync(() => hanging.hanging()), (n) => n >= 2)
          yield* quiet
          expect(yield* a.deliveries("?status=pending")).toHaveLength(9)

          const b = yield* webhookSandbox()
          const endpoint = yield* b.createEndpoint(fast.url, ["run.succeeded"])
          yield* b.finishedRun()
          // TestClock does not move: no attempt of A's times out to make room
          yield* waitFor(count(fast), (n) => n >= 1)
          expect(fast.received).toHaveLength(1)
          yield* verify(endpoint.secret, fast.received[0]!)
          const [delivery] = yield* waitFor(b.deliveries(), (ds) => ds[0]?.status === "succeeded")
          expect(Date.parse(delivery!.attempts[0].at) - Date.parse(delivery!.created_at)).toBeLessThanOrEqual(5000)
          // A held its environment's two slots (WEBHOOK_CELL_CONCURRENCY), no more
          expect(hanging.hanging()).toBe(2)
        }),
        { concurrency: 4, endpointConcurrency: 2, cellConcurrency: 2 }
      )
  )

  it.effect(
    `a delivery keeps its last ${KEPT_ATTEMPTS} attempts and counts them all (D20): replays append and trim`,
    () =>
      withApp(Effect.gen(function*() {
        const receiver = yield* startReceiver()
        // attempt i is answered 200 + i: which attempts are kept shows in their status codes
        const total = KEPT_ATTEMPTS + 2
        for (let i = 0; i < total; i++) receiver.script.push(200 + i)
        const s = yield* webhookSandbox()
        yield* s.createEndpoint(receiver.url, ["run.succeeded"])
        yield* s.finishedRun()
        yield* waitFor(count(receiver), (n) => n >= 1)
        const id = receiver.received[0]!.headers["webhook-id"]!
        yield* waitFor(s.delivery(id), (d) => d.status === "succeeded")
        const replay = s.hooks("POST", `/webhook-deliveries/${id}/replay`)
        for (let n = 2; n <= total; n++) {
          yield* TestClock.adjust("1 second") // the cell's rate limit (on the Clock) refills
          let answer = yield* replay
          // 409 until the previous attempt is recorded (a few ms after the receiver got it)
          while (answer.status === 409) answer = yield* Effect.zipRight(realSleep(5), replay)
          expectSingle(answer, 202)
          while (receiver.received.length < n) yield* realSleep(5)
        }
        yield* waitFor(s.delivery(id), (d) => (d.attempt_count ?? d.attempts.length) === total && d.status === "succeeded")
        expect(receiver.received).toHaveLength(total)
        const delivery = yield* s.delivery(id)
        expect(delivery.attempt_count).toBe(total)
        expect(delivery.attempts).toHaveLength(KEPT_ATTEMPTS)
        expect(delivery.attempts.map((a: any) => a.status_code)).toEqual(
          Array.from({ length: KEPT_ATTEMPTS }, (_, i) => 200 + total - KEPT_ATTEMPTS + i)
        )
        const [listed] = yield* s.deliveries()
        expect(listed).toMatchObject({ id, attempt_count: total })
        expect(listed.attempts).toHaveLength(KEPT_ATTEMPTS)
      })),
    60_000
  )
})
