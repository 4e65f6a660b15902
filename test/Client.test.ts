/**
 * The typed client (`agent-platform/client`, issue 15) against the real service: users, a
 * conversation on the quickstart revision and a run of its scripted model, its events streamed,
 * the D3 errors typed, the Idempotency-Key made per call unless given.
 */
import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import * as AgentPlatformClient from "agent-platform/client"
import { Chunk, Effect, Stream } from "effect"

import { makeTestApp, TestApp } from "./support/App.js"
import { operator } from "./support/Client.js"
import { sandboxWithKey, TOOL_SCOPES } from "./support/Sandboxes.js"

describe("typed client", () => {
  it.live("users, a conversation and a run on the quickstart revision, its events, typed errors", () =>
    Effect.gen(function*() {
      const app = yield* TestApp
      const sb = yield* sandboxWithKey(TOOL_SCOPES)
      const quickstart = (yield* operator("GET", `/tenants/${sb.tenantId}/environments/sandbox/quickstart`)).body
      const client = yield* AgentPlatformClient.make({ baseUrl: app.baseUrl, apiKey: sb.manager, tenantId: sb.tenantId })

      // A mutation without an Idempotency-Key gets a fresh one; with one, a retry replays.
      const ada = yield* client.users.createUser({ payload: { external_id: "ada", display_name: "Ada" } })
      expect(ada).toMatchObject({ object: "user", external_id: "ada", display_name: "Ada" })
      const once = { "idempotency-key": `client-${sb.tenantId}` }
      const grace = yield* client.users.createUser({ headers: once, payload: { external_id: "grace", display_name: "Grace" } })
      const replayed = yield* client.users.createUser({ headers: once, payload: { external_id: "grace", display_name: "Grace" } })
      expect(replayed.id).toBe(grace.id)
      // The key is made per call: running the same effect again (a retry) replays it.
      const createLin = client.users.createUser({ payload: { external_id: "lin", display_name: "Lin" } })
      const lin = yield* createLin
      expect((yield* createLin).id).toBe(lin.id)
      const page = yield* client.users.listUser({ urlParams: { limit: 10 } })
      expect(page.items.map((u) => u.id).sort()).toEqual([ada.id, grace.id, lin.id].sort())

      const conversation = yield* client.conversations.createConversation({
        payload: { workspace_id: quickstart.workspace_id, agent_revision_id: quickstart.agent_revision_id }
      })
      expect(conversation.agent_revision_id).toBe(quickstart.agent_revision_id)
      const [admitted, response] = yield* client.runs.createRun({
        path: { conversation_id: conversation.id },
        payload: { input: [{ type: "text", text: "Hello, client!" }] },
        withResponse: true
      })
      expect(response.status).toBe(202)
      const run = "_tag" in admitted ? admitted.run : admitted
      expect(response.headers["location"]).toContain(`/runs/${run.id}`)

      const events = Chunk.toReadonlyArray(yield* Stream.runCollect(client.streamRunEvents(run.id)))
      expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1))
      expect(events.at(-1)!.type).toBe("run.succeeded")
      const done = yield* client.runs.getRun({ path: { run_id: run.id } })
      expect(done.status).toBe("succeeded")
      expect(JSON.stringify(done.output)).toContain("Hello, client!")
      const listed = yield* client.events.listRunEvents({ path: { run_id: run.id } })
      expect(listed.items.map((e) => e.id)).toEqual(events.map((e) => e.id))

      // The D3 envelope comes back as its tagged error.
      const missing = yield* Effect.flip(client.users.getUser({ path: { user_id: "usr_nope" } }))
      expect(missing).toMatchObject({ _tag: "NotFound", code: "resource_missing" })
      const invalid = yield* Effect.flip(client.users.createUser({ payload: { external_id: "ada", display_name: "Ada again" } }))
      expect(invalid._tag).toBe("Conflict")
      const unknownRun = yield* Effect.flip(Stream.runDrain(client.streamRunEvents("run_nope")))
      expect(unknownRun).toMatchObject({ _tag: "NotFound" })
      const wrongKey = yield* AgentPlatformClient.make({ baseUrl: app.baseUrl, apiKey: "sk_test_nope", tenantId: sb.tenantId })
      expect(yield* Effect.flip(wrongKey.users.listUser())).toMatchObject({ _tag: "AuthenticationFailed" })
    }).pipe(Effect.provide(FetchHttpClient.layer), Effect.provide(makeTestApp())), 20_000)
})
