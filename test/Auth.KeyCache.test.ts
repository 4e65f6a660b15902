/**
 * The keys a process authenticated lately (issue 37, src/Platform/KeyCache.ts): a request is
 * answered without reading its key again, yet a revocation is effective on the very next request
 * of the process that made it, and on every process once Postgres told of its commit; a change
 * nobody was told of lasts at most AUTH_CACHE_SECONDS (2 s here). Real time: a few seconds.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"

import { defaultEdgeConfig } from "../src/Config/AppConfig.js"
import { makeTestApp } from "./support/App.js"
import { createKey, request } from "./support/Client.js"
import { expectErrorCode } from "./support/Envelopes.js"
import { sandboxWithManager } from "./support/Sandboxes.js"
import { realSleep } from "./support/Waiting.js"

const CACHE_SECONDS = 2

/** How long until `key` is refused (polled every 50 ms, up to 5 s): ms, or -1 if it never was. */
const refusedAfter = (P: string, key: string) =>
  Effect.gen(function*() {
    const from = Date.now()
    while (Date.now() - from < 5000) {
      const r = yield* request("GET", `${P}/api-keys`, { key })
      if (r.status === 401) {
        expectErrorCode(r, 401, "key_revoked")
        return Date.now() - from
      }
      expect(r.status).toBe(200)
      yield* realSleep(50)
    }
    return -1
  })

layer(makeTestApp({ edge: { ...defaultEdgeConfig, authCacheSeconds: CACHE_SECONDS } }), { excludeTestServices: true })(
  "keys kept by the process",
  (it) => {
    it.effect("a revocation: at once here, within a moment when told by Postgres, within AUTH_CACHE_SECONDS untold", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const sb = yield* sandboxWithManager()
        const use = (key: string) => request("GET", `${sb.P}/api-keys`, { key })

        // revoked through the API of this process: the very next request is refused
        const revoked = yield* createKey(sb.tenantId, ["keys:read"], "revoked-here")
        expect((yield* use(revoked.secret)).status).toBe(200)
        expect((yield* request("POST", `${sb.P}/api-keys/${revoked.id}/revoke`, { key: sb.manager })).status).toBe(200)
        expectErrorCode(yield* use(revoked.secret), 401, "key_revoked")

        // revoked by another writer (another node, an operator's SQL): told at its commit
        const told = yield* createKey(sb.tenantId, ["keys:read"], "told")
        expect((yield* use(told.secret)).status).toBe(200)
        yield* sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${told.id}`.pipe(Effect.orDie)
        const toldAfter = yield* refusedAfter(sb.P, told.secret)
        expect(toldAfter).toBeGreaterThanOrEqual(0)
        expect(toldAfter, "refused once Postgres told of the change, before the kept read expired").toBeLessThan(1000)

        // a change nobody is told of: the kept read answers until it expires, then the key is read again
        const untold = yield* createKey(sb.tenantId, ["keys:read"], "untold")
        expect((yield* use(untold.secret)).status).toBe(200)
        const keptAt = Date.now()
        yield* sql`ALTER TABLE api_keys DISABLE TRIGGER api_keys_auth_changed`.pipe(Effect.orDie)
        yield* sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${untold.id}`.pipe(Effect.orDie)
        yield* sql`ALTER TABLE api_keys ENABLE TRIGGER api_keys_auth_changed`.pipe(Effect.orDie)
        expect((yield* use(untold.secret)).status, "answered from the kept read").toBe(200)
        const untoldAfter = yield* refusedAfter(sb.P, untold.secret)
        expect(untoldAfter).toBeGreaterThanOrEqual(0)
        expect(Date.now() - keptAt).toBeLessThan((CACHE_SECONDS + 1) * 1000)
      }))
  }
)
