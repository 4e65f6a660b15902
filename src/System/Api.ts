/** Health (D1): no key needed. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { UnavailableError } from "../Kernel/Errors.js"

export const Health = Schema.Struct({ status: Schema.Literal("ok") }).annotations({ identifier: "Health" })

export class SystemApi extends HttpApiGroup.make("system")
  .annotate(OpenApi.Description, "Liveness and readiness probes (no key needed).")
  .add(
    HttpApiEndpoint.get("healthz", "/healthz")
      .annotate(OpenApi.Summary, "Liveness check")
      .addSuccess(Health)
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .annotate(OpenApi.Summary, "Readiness check")
      .addSuccess(Health)
      .addError(UnavailableError)
  )
{}
