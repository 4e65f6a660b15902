/**
 * Request pieces every capability's HttpApi group shares: the path parameters of a cell
 * (`/v1/tenants/{tenant_id}/environments/{environment}`) and the Idempotency-Key header of
 * mutations (D5).
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

import { EnvironmentName, PathId } from "./Ids.js"

/** A path identifier parameter (D2: 1..128 characters). */
export const idParam = <const Name extends string>(name: Name) => HttpApiSchema.param(name, PathId)

export const tenantId = idParam("tenant_id")
export const environment = HttpApiSchema.param("environment", EnvironmentName)

export const IdempotencyHeaders = Schema.Struct({
  "idempotency-key": Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)).annotations({
    description: "1 to 255 characters of 0x21-0x7E; scoped by actor, method, path, tenant and environment; replayed for 7 days"
  })
})
