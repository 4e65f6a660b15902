/**
 * The Platform SQL other capabilities compose (the Platform front door's queries): whether a run's
 * key (and acting user) may still act, which the Runtime reads with the rest of a run's first
 * dispatch in one round trip (src/Runtime/DispatchReads.ts), and PlatformRepo.authorization alone.
 */
import type { SqlClient } from "@effect/sql"
import { Schema } from "effect"

export const Authorization = Schema.Literal("active", "revoked", "deleted")
export type Authorization = typeof Authorization.Type

/**
 * The authorization of a run's key (and acting user) at `at`: a row with `authorization` (see
 * `PlatformRepo.authorization`), none when the key does not exist. A query of its own, so that the
 * run actor's first dispatch can read it with the rest of what it needs (src/Runtime/DispatchReads.ts).
 */
export const authorizationQuery = (sql: SqlClient.SqlClient, keyId: string, userId: string | null, at: Date) =>
  sql`SELECT CASE
               WHEN t.status <> 'active' OR e.state IN ('deleting', 'deleted') THEN 'deleted'
               WHEN k.revoked_at IS NOT NULL OR k.expires_at <= ${at} OR e.state <> 'ready' THEN 'revoked'
               WHEN ${userId}::text IS NOT NULL AND NOT EXISTS (
                 SELECT 1 FROM users u WHERE u.id = ${userId} AND u.status <> 'deleted' AND u.deleted_at IS NULL) THEN 'revoked'
               ELSE 'active'
             END AS authorization
      FROM api_keys k
      JOIN tenants t ON t.id = k.tenant_id
      JOIN environments e ON e.tenant_id = k.tenant_id AND e.name = k.environment
      WHERE k.id = ${keyId}`

/** The authorization read (none: the key no longer exists, so it may not act). */
export const authorizationOf = (read: Authorization | null | undefined): Authorization => read ?? "revoked"
