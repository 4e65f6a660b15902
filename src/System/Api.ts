/** Health (D1): no key needed. */
import { HttpApiEndpoint, HttpApiGroup } from "@effect/platform"
import { Schema } from "effect"

import { UnavailableError } from "../Kernel/Errors.js"

export const Health = Schema.Struct({ status: Schema.Literal("ok") }).annotations({ identifier: "Health" })

export class SystemApi extends HttpApiGroup.make("system")
  .add(HttpApiEndpoint.get("healthz", "/healthz").addSuccess(Health))
  .add(HttpApiEndpoint.get("readyz", "/readyz").addSuccess(Health).addError(UnavailableError))
{}
