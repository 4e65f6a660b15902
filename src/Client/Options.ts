/** What a client needs to reach one environment of a tenant: the base URL, the service key and the ids it defaults. */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { flow } from "effect"

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8080` (no `/v1`) */
  readonly baseUrl: string
  /** a service key, `sk_test_...` or `sk_live_...` */
  readonly apiKey: string
  /** the `tenant_id` of every path that has one, unless a call gives its own */
  readonly tenantId: string
  /** the `environment` of every path that has one, unless a call gives its own; default `sandbox` */
  readonly environment?: "sandbox" | "production" | undefined
}

/** Every request of the client: the base URL prepended, `Authorization: Bearer <apiKey>`. */
export const authorize = (options: ClientOptions) => (client: HttpClient.HttpClient): HttpClient.HttpClient =>
  HttpClient.mapRequest(
    client,
    flow(HttpClientRequest.prependUrl(options.baseUrl.replace(/\/+$/, "")), HttpClientRequest.bearerToken(options.apiKey))
  )
