/** Conversations, runs and run events (contract part 4 rows; D7, D8). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect, Schema } from "effect"

import { Conversation, CreateConversation, CreateRun, EventListParams, Run, RunEvent } from "../Domain/Runs.js"
import { Accepted, List, Single } from "../Kernel/Envelope.js"
import { Refusals } from "../Kernel/Errors.js"
import { environment, IdempotencyHeaders, idParam, tenantId } from "../Kernel/Params.js"
import { RequiredScopes, ServiceKey } from "../Kernel/Security.js"
import { GateAhead } from "../Kernel/UnitOfWork.js"

const conversationId = idParam("conversation_id")
const runId = idParam("run_id")

/** The 200 of `Prefer: wait` (a terminal run); distinct in code from the 202's plain run. */
export const TerminalRun = Schema.TaggedStruct("TerminalRun", { run: Schema.typeSchema(Run) })
const TerminalRunResponse = Single(Run).pipe(
  Schema.compose(Schema.transform(Schema.typeSchema(Run), TerminalRun, {
    strict: true,
    decode: (run) => TerminalRun.make({ run }),
    encode: (t) => t.run
  }))
).annotations(HttpApiSchema.annotations({ status: 200, description: "With `Prefer: wait=N`: the run ended within N seconds" }))

const encodeTerminalRun = Schema.encode(TerminalRunResponse)

/**
 * The 200 of `Prefer: wait` as a response: the run in its envelope (answered after the admission
 * committed, instead of the stored 202).
 */
export const terminalRunResponse = (run: Run) =>
  // made without validation: the encode validates the run (once, not twice)
  Effect.map(encodeTerminalRun(TerminalRun.make({ run }, true)), (body) => HttpServerResponse.unsafeJson(body, { status: 200 }))

export class ConversationsApi extends HttpApiGroup.make("conversations")
  .annotate(OpenApi.Description, "Conversations pin an agent revision; each run continues one.")
  .add(
    HttpApiEndpoint.post("createConversation")`/v1/tenants/${tenantId}/environments/${environment}/conversations`
      .annotate(OpenApi.Summary, "Create a conversation")
      .setHeaders(IdempotencyHeaders)
      .setPayload(CreateConversation)
      .addSuccess(Single(Conversation, 201))
      .annotate(
        OpenApi.Description,
        "Pins an immutable agent revision of an agent in the given workspace. " +
          "The quickstart key may use only its own workspace (403 `workspace_not_allowed`)."
      )
      .annotate(Refusals, [
        {
          code: "revision_not_in_workspace",
          param: "agent_revision_id",
          when: "the agent revision belongs to an agent of another workspace than `workspace_id`"
        }
      ])
      .annotate(RequiredScopes, ["conversations:write"])
  )
  .add(
    HttpApiEndpoint.get("getConversation")`/v1/tenants/${tenantId}/environments/${environment}/conversations/${conversationId}`
      .annotate(OpenApi.Summary, "Get a conversation")
      .addSuccess(Single(Conversation))
      .annotate(RequiredScopes, ["conversations:read"])
  )
  .middleware(ServiceKey)
{}

export class RunsApi extends HttpApiGroup.make("runs")
  .annotate(OpenApi.Description, "Durable runs of an agent: admitted before 202, continued after a disconnect, cancellable.")
  .add(
    HttpApiEndpoint.post("createRun")`/v1/tenants/${tenantId}/environments/${environment}/conversations/${conversationId}/runs`
      .annotate(OpenApi.Summary, "Create a run")
      .setHeaders(Schema.Struct({
        ...IdempotencyHeaders.fields,
        "x-actor-token": Schema.optional(Schema.String).annotations({
          description: "An actor session token (`POST .../actor-sessions`): the run acts for that user. " +
            "An unknown or expired token is 403 `actor_token_invalid`. The run's authorization still ends " +
            "`authorization_expires_at` after creation; a fresh token does not extend it."
        }),
        prefer: Schema.optional(Schema.String).annotations({
          description: "`wait=N` (1..10; larger counts as 10): wait up to N seconds for the run to end. " +
            "Answered with `Preference-Applied: wait=N`"
        })
      }))
      .setPayload(CreateRun)
      .addSuccess(Accepted(Run))
      .addSuccess(TerminalRunResponse)
      .annotate(
        OpenApi.Description,
        "Admits a run: it is durably stored before 202 (with `Location`) is returned, and " +
          "continues if the client disconnects. One unfinished run per conversation (409 `conversation_busy`). " +
          "Counted against the environment's quotas (`GET .../quotas`) in the admission's own statement: past " +
          "`runs_per_day`, `concurrent_runs` or `tokens_per_day` it is 429 `quota_exceeded` with `Retry-After` (until " +
          "midnight UTC for a daily quota, 1 s for `concurrent_runs`), nothing is written and the same Idempotency-Key " +
          "may be retried."
      )
      .annotate(Refusals, [
        {
          code: "input_too_large",
          param: "input.N.text",
          when: "an input text holds more than 100,000 characters",
          inSchema: true
        }
      ])
      .annotate(RequiredScopes, ["runs:write"])
      .annotate(GateAhead, true)
  )
  .add(
    HttpApiEndpoint.get("getRun")`/v1/tenants/${tenantId}/environments/${environment}/runs/${runId}`
      .annotate(OpenApi.Summary, "Get a run")
      .addSuccess(Single(Run))
      .annotate(RequiredScopes, ["runs:read"])
  )
  .add(
    HttpApiEndpoint.post("cancelRun")`/v1/tenants/${tenantId}/environments/${environment}/runs/${runId}/cancel`
      .annotate(OpenApi.Summary, "Cancel a run")
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Accepted(Run))
      .annotate(
        OpenApi.Description,
        "202 with the run in `cancel_requested`: new dispatch stops and the runtime is " +
          "interrupted; the run then becomes `cancelled`. An accepted tool operation is not undone. A finished run: 409 " +
          "`run_not_cancellable`."
      )
      .annotate(RequiredScopes, ["runs:write"])
  )
  .middleware(ServiceKey)
{}

export class EventsApi extends HttpApiGroup.make("events")
  .annotate(OpenApi.Description, "A run's events, in sequence order: as pages or as a Server-Sent Events stream.")
  .add(
    HttpApiEndpoint.get("listRunEvents")`/v1/tenants/${tenantId}/environments/${environment}/runs/${runId}/events`
      .annotate(OpenApi.Summary, "List a run's events")
      .setUrlParams(EventListParams)
      .addSuccess(List(RunEvent))
      .annotate(
        OpenApi.Description,
        "Events in sequence order (`cursor`: an event id or `next_cursor` of this run, else 400 `invalid_cursor`). " +
          "`next_cursor` is the id of the page's last event; " +
          "an event id and a cursor are interchangeable (also with `Last-Event-ID` of the stream). A null `next_cursor` " +
          "does not mean no more events will come: keep the last event id and poll from it."
      )
      .annotate(RequiredScopes, ["runs:read"])
  )
  .add(
    HttpApiEndpoint.get("streamRunEvents")`/v1/tenants/${tenantId}/environments/${environment}/runs/${runId}/events/stream`
      .annotate(OpenApi.Summary, "Stream a run's events")
      .setHeaders(Schema.Struct({
        accept: Schema.optional(
          // the handler's rule (case-insensitive), as a pattern: `text/event-stream` or `*/*` somewhere in it
          Schema.String.annotations({
            jsonSchema: { pattern: "[Tt][Ee][Xx][Tt]/[Ee][Vv][Ee][Nn][Tt]-[Ss][Tt][Rr][Ee][Aa][Mm]|\\*/\\*" }
          })
        ).annotations({
          description: "Optional; when sent, it must accept `text/event-stream` (or `*/*`), else 400 " +
            "`accept_event_stream_required` (param `accept`)"
        }),
        "last-event-id": Schema.optional(Schema.String).annotations({
          description: "Resume after this event id (an event of this run; wins over `cursor`)"
        })
      }))
      .setUrlParams(Schema.Struct({ cursor: Schema.optional(Schema.String) }))
      .addSuccess(
        Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/event-stream" }))
          .annotations({ description: "The run's events as Server-Sent Events" })
      )
      .annotate(
        OpenApi.Description,
        "Server-Sent Events: `id: <event id>`, `event: <type>`, `data: <event JSON>`, and " +
          "a `: ping` comment at least every 15 s. Without `Last-Event-ID` the stream starts at the run's first event. " +
          "It ends after a terminal event (not after `run.outcome_unknown`, which a `run.reconciled` receipt may follow) " +
          "and within 15 s of the key's revocation. At most 128 open streams per environment and 16 per key " +
          "(429 `stream_limit_reached`)."
      )
      .annotate(Refusals, [
        {
          code: "accept_event_stream_required",
          param: "accept",
          when: "an `Accept` is sent that accepts neither `text/event-stream` nor `*/*`",
          inSchema: true
        },
        { code: "invalid_cursor", param: "Last-Event-ID", when: "`Last-Event-ID` is not an event id of this run" }
      ])
      .annotate(RequiredScopes, ["runs:read"])
  )
  .middleware(ServiceKey)
{}
