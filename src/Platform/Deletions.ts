/**
 * The purge worker (contract 4 rules 6-7): deletion jobs whose `purge_after` has come are taken
 * one at a time (`FOR UPDATE SKIP LOCKED`, so several processes share the work) and their live
 * data is removed in one transaction with the job's completion, which is announced there too
 * (webhook event `deletion_job.succeeded`, D18: to the endpoints of the job's environment that
 * are left, so a user's deletion; an environment's or tenant's purge deletes its endpoints).
 * Expired tombstones are swept too. Both run on Effect's Clock, so a suite drives the 24 h purge
 * window with TestClock.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Clock, Effect, Exit, Schedule } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { makeId } from "../Kernel/Ids.js"
import { traced } from "../Kernel/Spans.js"
import { WebhooksRepo } from "../Webhooks.js"
import { PurgeRepo } from "./PurgeRepo.js"
import { type DeletionJobRow, toDeletionJob } from "./Rows.js"

const MAX_ATTEMPTS = 5
const RETRY_BACKOFF_SECONDS = 300

/** A short, operator-readable reason (with the database's own message when there is one). */
const describe = (e: unknown): string => {
  const message = e instanceof Error ? e.message : String(e)
  const cause = e instanceof Error && e.cause instanceof Error ? `: ${e.cause.message}` : ""
  return `${message}${cause}`.slice(0, 500)
}

export class Deletions extends Effect.Service<Deletions>()("Deletions", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const repo = yield* PurgeRepo
    const webhooks = yield* WebhooksRepo

    const purge = (job: DeletionJobRow, at: Date) => {
      switch (job.resource_type) {
        case "user":
          return repo.purgeUser(job, at)
        case "environment":
          return repo.purgeEnvironment(job.tenant_id, job.environment, at)
        case "tenant":
          return Effect.gen(function*() {
            for (const env of yield* repo.environmentsOf(job.tenant_id)) yield* repo.purgeEnvironment(job.tenant_id, env, at)
            yield* repo.markTenantDeleted(job.tenant_id, at)
          })
      }
    }

    /**
     * Runs one due job; false when none is due. The purge runs in a savepoint: a failure rolls it
     * back whole (nothing half-purged), records the error and retries later with backoff; after
     * MAX_ATTEMPTS the job is `failed` (and no longer blocks the jobs behind it).
     */
    const runOne = Effect.gen(function*() {
      const at = new Date(yield* Clock.currentTimeMillis)
      return yield* sql.withTransaction(Effect.gen(function*() {
        const job = yield* repo.lockDueJob(at)
        if (!job) return false
        const outcome = yield* Effect.exit(sql.withTransaction(purge(job, at)))
        if (Exit.isSuccess(outcome)) {
          const done = yield* repo.jobSucceeded(job.id, at)
          yield* webhooks.enqueue({
            cell: { tenantId: done.tenant_id, environment: done.environment },
            type: "deletion_job.succeeded",
            eventId: yield* makeId("evt"),
            at,
            data: toDeletionJob(done)
          })
          yield* Effect.logInfo("deletion job succeeded").pipe(Effect.annotateLogs({ job: job.id, resource: job.resource_type }))
          return true
        }
        const attempts = job.attempts + 1
        const error = describe(Cause.squash(outcome.cause))
        const final = attempts >= MAX_ATTEMPTS
        const retryAt = final ? job.purge_after : new Date(at.getTime() + RETRY_BACKOFF_SECONDS * 1000 * 2 ** (attempts - 1))
        yield* repo.jobAttemptFailed(job.id, { at, attempts, error, final, retryAt })
        yield* Effect.logError("deletion job attempt failed", outcome.cause).pipe(
          Effect.annotateLogs({ job: job.id, resource: job.resource_type, attempts })
        )
        return true
      }))
    })

    const sweepTombstones = Effect.flatMap(Clock.currentTimeMillis, (now) => repo.sweepTombstones(new Date(now)))

    /** Purges everything that is due, then sweeps tombstones past retention. */
    const runDue = Effect.gen(function*() {
      let n = 0
      while (yield* runOne) n++
      yield* sweepTombstones
      return n
    }).pipe(Effect.orDie, traced("Deletions.runDue"))

    yield* runDue.pipe(
      Effect.catchAllCause((cause) => Effect.logError("deletion worker failed", cause)),
      Effect.repeat(Schedule.spaced(`${config.sweepIntervalSeconds} seconds`)),
      Effect.forkScoped
    )

    return { runDue } as const
  }),
  dependencies: [PurgeRepo.Default, WebhooksRepo.Default]
}) {}
