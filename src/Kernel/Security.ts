/**
 * Per-operation scopes (contract part 5). An endpoint declares its scopes once with `scopes(...)`;
 * the same annotation drives the `ServiceKey` middleware (403 `missing_scope`) and the OpenAPI
 * `security` requirement.
 */
import { HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, type Effect, Schema } from "effect"

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
      HttpApiSecurity.annotate(
        OpenApi.Description,
        "The shared operator token (OPERATOR_TOKEN, audited as `operator`) or an operator's personal token (`opk_...`, made in " +
          "the operator console after a TOTP code, audited with the operator account's id); only for /operator/v1 and GET /metrics"
      )
    )
  }
}) {}

/**
 * Operators' personal tokens (issue 39): a live one (`opk_...`) acts as its operator account
 * (`acc_...`). The console capability keeps the accounts and tokens; the operator plane's
 * authentication asks here (`OperatorToken.whoIs`: the shared OPERATOR_TOKEN is `operator`).
 */
export class OperatorCredentials extends Context.Tag("OperatorCredentials")<OperatorCredentials, {
  /** the operator account a live personal token acts for, else undefined */
  readonly accountOf: (token: string) => Effect.Effect<string | undefined>
}>() {}
