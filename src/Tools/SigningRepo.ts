/** SQL of the cells' invocation signing keys (D10): the private half sealed, the public half as a JWK. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import type { Sealed } from "../Crypto/Secrets.js"
import * as Rows from "../Database/Rows.js"
import type { CellRef } from "../Kernel/Principal.js"

export const SigningKeyRow = Schema.Struct({
  kid: Schema.String,
  public_jwk: Rows.JsonObject,
  private_ciphertext: Rows.Bytes,
  private_iv: Rows.Bytes,
  private_tag: Rows.Bytes
})
export type SigningKeyRow = typeof SigningKeyRow.Type

export class SigningRepo extends Effect.Service<SigningRepo>()("SigningRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** A new active key; a racing maker of the cell's active key loses on the unique index (nothing inserted). */
    const insert = (k: { kid: string; cell: CellRef; publicJwk: object; sealed: Sealed; at: Date }) =>
      sql`INSERT INTO signing_keys (kid, tenant_id, environment, public_jwk, private_ciphertext, private_iv, private_tag, created_at)
          VALUES (${k.kid}, ${k.cell.tenantId}, ${k.cell.environment}, ${JSON.stringify(k.publicJwk)}::jsonb,
                  ${k.sealed.ciphertext}, ${k.sealed.iv}, ${k.sealed.tag}, ${k.at})
          ON CONFLICT DO NOTHING`.pipe(Rows.none)

    const active = (cell: CellRef) =>
      sql`SELECT kid, public_jwk, private_ciphertext, private_iv, private_tag FROM signing_keys
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND retired_at IS NULL`
        .pipe(Rows.maybe(SigningKeyRow))

    /** The public keys to publish at `at`: the active one and retired ones still in their overlap. */
    const published = (cell: CellRef, at: Date) =>
      sql`SELECT public_jwk FROM signing_keys
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment}
            AND (retired_at IS NULL OR publish_until > ${at})
          ORDER BY created_at DESC`.pipe(
        Rows.all(Schema.Struct({ public_jwk: Rows.JsonObject })),
        Effect.map((rows) => rows.map((r) => r.public_jwk))
      )

    const retireActive = (cell: CellRef, at: Date, publishUntil: Date) =>
      sql`UPDATE signing_keys SET retired_at = ${at}, publish_until = ${publishUntil}
          WHERE tenant_id = ${cell.tenantId} AND environment = ${cell.environment} AND retired_at IS NULL`.pipe(Rows.none)

    return { insert, active, published, retireActive } as const
  })
}) {}
