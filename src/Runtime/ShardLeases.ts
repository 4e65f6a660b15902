/**
 * This node's shard leases as it last confirmed them (issue 41). The runners hold their shards as
 * leases in `cluster_locks` (the library's `shardLockDisableAdvisory`: a row per shard whose
 * `acquired_at` the owner renews every CLUSTER_LOCK_REFRESH_SECONDS; another runner may take a
 * shard whose row is older than CLUSTER_LOCK_EXPIRATION_SECONDS, by the database's clock), so a
 * runner that stops renewing loses its shards whatever its database sessions do: a hung process
 * (SIGSTOP, a frozen VM, a half-open socket) kept its session, and with it an advisory lock, open.
 *
 * The library learns that it lost a shard only at its next renewal, and a node that resumes from a
 * stall could answer for its old cells in between. So each renewal and acquisition is noted here,
 * per shard, with the local time it began: the row was renewed no earlier than that, so the lease
 * holds until that time plus the expiration. `holds` is false for a shard whose lease this node
 * cannot vouch for (a margin short of the expiration): the node then refuses to serve that cell
 * (503, src/Runtime/CellsLive.ts) until a renewal says whether it is still its own.
 */
import { RunnerStorage, SqlRunnerStorage } from "@effect/cluster"
import { Effect, Layer } from "effect"

export interface ShardLeases {
  /** this node holds the lease on `shardId` (`group:n`) now, with a margin to spare */
  readonly holds: (shardId: string) => boolean
}

/** The lease book and the library's SQL runner storage that keeps it. */
export const make = (expirationSeconds: number, refreshSeconds: number) => {
  /** shard -> local time (ms) at which its last successful renewal or acquisition began */
  const renewedAt = new Map<string, number>()
  // Another runner may take the shard once the database's clock is past the renewal plus the
  // expiration; half a renewal interval short of that leaves room for the request being served.
  const validMillis = (expirationSeconds - refreshSeconds / 2) * 1000
  const leases: ShardLeases = {
    holds: (shardId) => {
      const at = renewedAt.get(shardId)
      return at !== undefined && Date.now() - at < validMillis
    }
  }
  const noted = (began: number, asked: Iterable<{ toString(): string }>, held: ReadonlyArray<{ toString(): string }>) => {
    for (const shard of asked) renewedAt.delete(shard.toString())
    for (const shard of held) renewedAt.set(shard.toString(), began)
  }
  const storage = Layer.effect(
    RunnerStorage.RunnerStorage,
    Effect.map(RunnerStorage.RunnerStorage, (inner) =>
      RunnerStorage.RunnerStorage.of({
        ...inner,
        acquire: (address, shardIds) => {
          const asked = Array.from(shardIds)
          const began = Date.now()
          return Effect.tap(inner.acquire(address, asked), (held) => noted(began, [], held))
        },
        refresh: (address, shardIds) => {
          const asked = Array.from(shardIds)
          const began = Date.now()
          return Effect.tap(inner.refresh(address, asked), (held) => noted(began, asked, held))
        },
        // forgotten before the release begins: a shard being given up is not served from here
        release: (address, shardId) =>
          Effect.zipRight(Effect.sync(() => renewedAt.delete(shardId.toString())), inner.release(address, shardId)),
        releaseAll: (address) => Effect.zipRight(Effect.sync(() => renewedAt.clear()), inner.releaseAll(address))
      }))
  ).pipe(Layer.provide(Layer.orDie(SqlRunnerStorage.layer)))
  return { leases, storage }
}
