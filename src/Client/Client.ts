/**
 * The typed client: `HttpApiClient` of the one `HttpApi` (`src/Api.ts`), its /v1 operations grouped
 * like the API, with the key as `Authorization: Bearer`, the tenant and environment filled into
 * every path that has them and a fresh `Idempotency-Key` (a random UUID) on every mutation that is
 * not given one, made per call (running the returned effect again, e.g. `Effect.retry`, reuses it;
 * pass your own to retry across calls or processes). Errors come back as the D3 envelope's tagged
 * errors (`NotFound`, `Conflict`, ... with `code`, `message`, `param`).
 */
import { HttpApiClient, HttpClient } from "@effect/platform"
import type { HttpApiEndpoint } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"

import { Api } from "../Api.js"
import { makeStreamRunEvents, type StreamRunEvents } from "./Events.js"
import { authorize, type ClientOptions } from "./Options.js"
import type { Groups } from "./Types.js"

export interface AgentPlatformClient extends Groups {
  /** The run's events as they are committed (SSE), until its terminal event ends the stream. */
  readonly streamRunEvents: StreamRunEvents
}

type Call = (request: any) => Effect.Effect<any, any>

/**
 * Fills what the caller left out: the path's tenant and environment, a mutation's Idempotency-Key,
 * and empty query parameters and headers (all optional where the type lets them be left out).
 */
const withDefaults = (endpoint: HttpApiEndpoint.HttpApiEndpoint.AnyWithProps, call: Call, options: ClientOptions): Call => {
  const path = { tenant_id: options.tenantId, environment: options.environment ?? "sandbox" }
  const hasPath = endpoint.pathSchema._tag === "Some"
  const mutation = endpoint.method !== "GET"
  // The key is made when the method is called, not when its effect runs: `Effect.retry` of the
  // returned effect sends the same key again, so a retried mutation is replayed, never repeated.
  return (request: any = {}) =>
    call({
      ...request,
      ...(hasPath ? { path: { ...path, ...request.path } } : {}),
      urlParams: request.urlParams ?? {},
      headers: mutation ? { "idempotency-key": randomUUID(), ...request.headers } : (request.headers ?? {})
    })
}

/** The client, on the `HttpClient` in context (`FetchHttpClient.layer` in Node 20+ or a browser). */
export const make = (options: ClientOptions): Effect.Effect<AgentPlatformClient, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const http = authorize(options)(yield* HttpClient.HttpClient)
    const raw = (yield* HttpApiClient.makeWith(Api, { httpClient: http })) as unknown as Record<string, Record<string, Call>>
    const client: Record<string, unknown> = { streamRunEvents: makeStreamRunEvents(http, options) }
    for (const group of Object.values(Api.groups)) {
      if (group.identifier === "operator") continue
      client[group.identifier] = Object.fromEntries(
        Object.values(group.endpoints).map((endpoint) => [
          endpoint.name,
          withDefaults(endpoint, raw[group.identifier]![endpoint.name]!, options)
        ])
      )
    }
    return client as unknown as AgentPlatformClient
  })

export class AgentPlatform extends Context.Tag("agent-platform/client/AgentPlatform")<AgentPlatform, AgentPlatformClient>() {}

/** `AgentPlatform` as a layer; provide an `HttpClient`, e.g. `Layer.provide(FetchHttpClient.layer)`. */
export const layer = (options: ClientOptions): Layer.Layer<AgentPlatform, never, HttpClient.HttpClient> =>
  Layer.effect(AgentPlatform, make(options))
