/**
 * The keys this process authenticated lately (issue 37): a request whose key was read here less
 * than AUTH_CACHE_SECONDS ago is answered from that read, one statement less per request.
 *
 * What a key authenticates as changes by a revocation, a rotation's early expiry, or a deletion of
 * its tenant or environment. Each of those:
 *   - on this process, forgets every key once the request that made it committed (`forget`, after
 *     its commit), before its answer leaves: the next request is refused, as without a cache;
 *   - on every process, forgets every key when Postgres tells of its commit (channel
 *     `auth_changed`, migration 0033: any statement that changes those columns, whoever sends it).
 * A read that began before a change and ends after its notice is not kept (each `forget` starts a
 * new epoch, and a read keeps its row only in the epoch it began in). Until LISTEN is active, and
 * each time it is made again (a notice may have been missed), everything is forgotten; a process
 * whose LISTEN connection is lost keeps answering from its reads for at most AUTH_CACHE_SECONDS.
 * Only keys that authenticated are kept (an unknown or refused secret is read every time); the
 * expiry of a rotated key is compared with the clock on every request.
 */
import { Clock, Effect, Stream } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { Notifications } from "../Database/Listener.js"
import type { KeyLookupRow } from "./Rows.js"

/** The channel of migration 0033's triggers. */
export const AUTH_CHANGED = "auth_changed"

/** At most this many keys are kept (the oldest reads go first). */
const MAX_KEYS = 10_000

interface Entry {
  readonly row: KeyLookupRow
  readonly until: number
}

export class KeyCache extends Effect.Service<KeyCache>()("KeyCache", {
  scoped: Effect.gen(function*() {
    const ttlMillis = (yield* AppConfig).edge.authCacheSeconds * 1000
    const notifications = yield* Notifications
    const entries = new Map<string, Entry>()
    let epoch = 0
    let listening = false
    /** when everything was last forgotten (`performance.now()`) */
    let changedAt = performance.now()

    const forgetAll = () => {
      epoch++
      changedAt = performance.now()
      entries.clear()
    }
    if (ttlMillis > 0) {
      yield* notifications.listen(AUTH_CHANGED).pipe(
        // LISTEN (re)made (a notice may have been missed) or a change told: forget everything
        Stream.runForEach((notice) =>
          Effect.sync(() => {
            if (notice._tag === "Listening") listening = true
            forgetAll()
          })
        ),
        Effect.forkScoped
      )
    }

    return {
      /** The row of the key whose secret hashes to `id`, when read here lately and nothing changed since. */
      get: (id: string) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const entry = entries.get(id)
          if (entry === undefined) return undefined
          if (entry.until > now) return entry.row
          entries.delete(id)
          return undefined
        }),
      /** Where a read begins: `keep` keeps its row only if nothing changed since. */
      epoch: Effect.sync(() => epoch),
      /** Keeps the row of a key that authenticated, read in epoch `readIn`. */
      keep: (id: string, row: KeyLookupRow, readIn: number) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.sync(() => {
            // (never listening with AUTH_CACHE_SECONDS=0: nothing is kept)
            if (!listening || readIn !== epoch) return
            if (entries.size >= MAX_KEYS) entries.delete(entries.keys().next().value!)
            entries.set(id, { row, until: now + ttlMillis })
          })),
      /**
       * Whether what a key authenticates as was read at `at` (`performance.now()`) may still be
       * trusted: nothing was told changed since (never while not listening, so never with
       * AUTH_CACHE_SECONDS=0). A run's first dispatch trusts its admission's read of its key so.
       */
      unchangedSince: (at: number) => Effect.sync(() => listening && changedAt < at),
      /** Forgets every key: call once a change of a key, tenant or environment committed. */
      forget: Effect.sync(forgetAll)
    } as const
  })
}) {}
