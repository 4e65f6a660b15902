/**
 * A run's events as they are committed (`GET .../runs/{run_id}/events/stream`). The HttpApi
 * declares that operation's body as `text/event-stream` text, which `HttpApiClient` would read
 * whole once the stream ended; this reads it as it arrives, frame by frame (the SSE parser of
 * `@effect/experimental`), each `data:` decoded as a `RunEvent`.
 */
import * as Sse from "@effect/experimental/Sse"
import { type HttpClient, type HttpClientError, HttpClientRequest, HttpClientResponse } from "@effect/platform"
import { Effect, type ParseResult, Schema, Stream } from "effect"

import { Api } from "../Api.js"
import { RunEvent } from "../Domain/Runs.js"
import type { ClientOptions } from "./Options.js"
import type { ApiError } from "./Types.js"

export interface StreamRunEventsOptions {
  /** resume after this event id (`Last-Event-ID`); without it the stream starts at the run's first event */
  readonly lastEventId?: string | undefined
  readonly tenantId?: string | undefined
  readonly environment?: "sandbox" | "production" | undefined
}

export type StreamRunEvents = (
  runId: string,
  options?: StreamRunEventsOptions
) => Stream.Stream<RunEvent, ApiError | HttpClientError.HttpClientError | ParseResult.ParseError>

const decodeEvent = Schema.decode(Schema.parseJson(RunEvent))
const decodeError = HttpClientResponse.schemaBodyJson(Api.errorSchema)

/** `streamRunEvents` over an authorized client (see `authorize`); the stream ends after the run's terminal event. */
export const makeStreamRunEvents = (http: HttpClient.HttpClient, defaults: ClientOptions): StreamRunEvents => (runId, options = {}) => {
  const tenantId = encodeURIComponent(options.tenantId ?? defaults.tenantId)
  const environment = options.environment ?? defaults.environment ?? "sandbox"
  const request = HttpClientRequest.get(
    `/v1/tenants/${tenantId}/environments/${environment}/runs/${encodeURIComponent(runId)}/events/stream`,
    { acceptJson: false, headers: options.lastEventId !== undefined ? { "last-event-id": options.lastEventId } : {} }
  ).pipe(HttpClientRequest.accept("text/event-stream"))
  return http.execute(request).pipe(
    Effect.flatMap((response) =>
      response.status === 200 ? Effect.succeed(response.stream) : Effect.flatMap(decodeError(response), Effect.fail)
    ),
    Stream.unwrap,
    Stream.decodeText(),
    Stream.pipeThroughChannel(Sse.makeChannel()),
    Stream.mapEffect((frame) => decodeEvent(frame.data))
  )
}
