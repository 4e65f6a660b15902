/**
 * Per-operation scopes (contract part 5). An endpoint declares its scopes once with `scopes(...)`;
 * the same annotation drives the `ServiceKey` middleware (403 `missing_scope`) and the OpenAPI
 * `security` requirement.
 */
import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"

import { AuthenticationError, PermissionError } from "./Errors.js"
import { CurrentPrincipal } from "./Principal.js"
import type { Scope } from "./Scopes.js"

export class RequiredScopes extends Context.Tag("RequiredScopes")<RequiredScopes, ReadonlyArray<Scope>>() {}

export class ServiceKey extends HttpApiMiddleware.Tag<ServiceKey>()("ServiceKey", {
  provides: CurrentPrincipal,
  failure: Schema.Union(AuthenticationError, PermissionError),
  security: {
    ServiceKey: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(
        OpenApi.Description,
        "A service key (`sk_test_...` / `sk_live_...`) sent as `Authorization: Bearer <key>`. Keys are bound to one tenant and environment. " +
          "Requests without a valid key (none, unknown, revoked or expired, even one that worked a moment ago) are rate limited per " +
          "client address (20/s, burst 40 by default): 429 `rate_limited` with `Retry-After`."
      )
    )
  }
}) {}

/** The operator plane's bearer token (D1): `/operator/v1` only, never accepted on `/v1`. */
export class OperatorAuth extends HttpApiMiddleware.Tag<OperatorAuth>()("OperatorAuth", {
  failure: AuthenticationError,
  security: {
    OperatorToken: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "The operator token (OPERATOR_TOKEN); only for /operator/v1")
    )
  }
}) {}
