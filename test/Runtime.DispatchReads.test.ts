/**
 * A run actor's first dispatch reads the key's authorization, the pinned revision and the
 * conversation's window in one statement (src/Runtime/DispatchReads.ts, issue 20). It must answer
 * what the three queries it is made of answer on their own (PlatformRepo.authorization,
 * AgentsRepo.revisionContext, RunStore.items), in real Postgres: an active key, a revoked, an
 * expired and a missing one, a deleted environment, a missing revision, a window cut by the
 * budget, an empty conversation.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"

import { AgentsRepo } from "../src/Agents/Repo.js"
import { PlatformRepo } from "../src/Platform/Repo.js"
import { firstDispatchQuery } from "../src/Runs/Queries.js"
import { RunStoreSql } from "../src/Runs/Repo.js"
import { RunStore } from "../src/Runs/RunStore.js"
import { carriedDispatch, type Dispatched, DispatchReads, DispatchReadsSql } from "../src/Runtime/DispatchReads.js"
import { makeTestApp } from "./support/App.js"
import { request } from "./support/Client.js"
import { expectSingle } from "./support/Envelopes.js"
import { isTerminal, scriptedSandbox } from "./support/Sandboxes.js"
import { eventually } from "./support/Waiting.js"

layer(makeTestApp(), { excludeTestServices: true, timeout: "60 seconds" })("the first dispatch's reads", (it) => {
  it.effect("one statement answers what the key's, the revision's and the window's queries answer on their own", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const reads = Context.get(yield* Layer.build(DispatchReadsSql), DispatchReads)
      const platform = Context.get(yield* Layer.build(PlatformRepo.Default), PlatformRepo)
      const agents = Context.get(yield* Layer.build(AgentsRepo.Default), AgentsRepo)
      const store = Context.get(yield* Layer.build(RunStoreSql), RunStore)

      // a conversation of three finished runs: six items
      const s = yield* scriptedSandbox([{ type: "text", text: "answer to {{input}}" }])
      const conversation = yield* s.conversation()
      let runId = ""
      for (const text of ["one", "two", "three"]) {
        runId = expectSingle(yield* s.startRun(conversation.id, text), 202).id
        yield* eventually(s.getRun(runId), (r) => isTerminal(r.status))
      }
      const [run] = yield* Effect.orDie(sql<Dispatched>`
        SELECT key_id, user_id, agent_revision_id, conversation_id FROM runs WHERE id = ${runId}`)

      /** The one statement's answer, checked against the three queries'. */
      const compared = (of: Dispatched, budgetBytes: number) =>
        Effect.gen(function*() {
          const combined = yield* reads.first(of, budgetBytes)
          const alone = {
            authorization: yield* platform.authorization(of.key_id, of.user_id, new Date()),
            revision: yield* agents.revisionContext(of.agent_revision_id),
            items: yield* store.items(of.conversation_id, budgetBytes)
          }
          expect(combined).toEqual(alone)
          return combined
        }).pipe(Effect.orDie)

      const all = yield* compared(run!, 600_000)
      expect(all.authorization).toBe("active")
      expect(all.revision?.instructions).toBe("Be brief.")
      expect(all.revision?.provider).toBe("scripted")
      expect(all.items.map((i: any) => i.type)).toEqual([
        "user_message",
        "assistant_message",
        "user_message",
        "assistant_message",
        "user_message",
        "assistant_message"
      ])
      expect(all.items[4]).toEqual({ type: "user_message", text: "three" })
      expect(all.items[5]).toEqual({ type: "assistant_message", text: "answer to three" })
      // a budget of one byte: from the latest user message on
      const cut = yield* compared(run!, 1)
      expect(cut.items).toEqual(all.items.slice(4))
      // nothing in the conversation, no such revision, no such key
      const none = yield* compared(
        { ...run!, conversation_id: "conv_missing", agent_revision_id: "rev_missing", key_id: "key_missing" },
        600_000
      )
      expect(none).toEqual({ authorization: "revoked", revision: undefined, items: [] })

      // the key expired, then revoked
      yield* Effect.orDie(sql`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = ${run!.key_id}`)
      expect((yield* compared(run!, 600_000)).authorization).toBe("revoked")
      yield* Effect.orDie(sql`UPDATE api_keys SET expires_at = NULL, revoked_at = now() WHERE id = ${run!.key_id}`)
      expect((yield* compared(run!, 600_000)).authorization).toBe("revoked")
      // the environment being deleted wins over the key
      yield* Effect.orDie(sql`UPDATE environments SET state = 'deleting' WHERE tenant_id = ${s.tenantId} AND name = 'sandbox'`)
      expect((yield* compared(run!, 600_000)).authorization).toBe("deleted")
    }).pipe(Effect.scoped))

  it.effect(
    "the admission's read (its last statement, before the input it writes is visible) answers what the actor reads once it committed",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const reads = Context.get(yield* Layer.build(DispatchReadsSql), DispatchReads)
        const s = yield* scriptedSandbox([{ type: "text", text: "answer to {{input}}" }])
        const conversation = yield* s.conversation()
        let runId = ""
        for (const text of ["one", "two"]) {
          runId = expectSingle(yield* s.startRun(conversation.id, text), 202).id
          yield* eventually(s.getRun(runId), (r) => isTerminal(r.status))
        }
        const [run] = yield* Effect.orDie(sql<Dispatched>`
          SELECT key_id, user_id, agent_revision_id, conversation_id FROM runs WHERE id = ${runId}`)
        // a revision whose model profile holds a credential (bytea columns, hex strings in JSON)
        const post = (path: string, body: unknown) =>
          Effect.map(request("POST", `${s.P}${path}`, { key: s.key, body, idempotencyKey: `${path}-${Math.random()}` }), (r) =>
            expectSingle(r, 201))
        const profile = yield* post("/model-profiles", {
          name: "gpt",
          provider: "openai",
          model: "gpt-4.1",
          credential: "sk-test-credential"
        })
        const revision = yield* post(`/agents/${s.agent.id}/revisions`, { model_profile_id: profile.id, instructions: "x", tool_ids: [] })
        const cases: ReadonlyArray<readonly [Dispatched, number]> = [
          [run!, 600_000],
          [run!, 1],
          [{ ...run!, agent_revision_id: revision.id }, 600_000]
        ]
        for (const [n, [of, budget]] of cases.entries()) {
          const pending = { type: "user_message", text: `pending ${n}` }
          const [carried] = yield* Effect.orDie(sql<{ row: unknown }>`
            SELECT to_jsonb(r) AS row FROM (${firstDispatchQuery(sql, of, budget, new Date(), { item: pending })}) r`)
          // what the admission's statement writes with it (Statements.appendInput)
          yield* Effect.orDie(sql`
            INSERT INTO conversation_items (conversation_id, position, run_id, item, created_at)
            SELECT ${of.conversation_id}, COALESCE(MAX(position), 0) + 1, ${runId}, ${JSON.stringify(pending)}::jsonb, now()
            FROM conversation_items WHERE conversation_id = ${of.conversation_id}`)
          const after = yield* Effect.orDie(reads.first(of, budget))
          expect(yield* carriedDispatch(carried!.row)).toEqual(after)
          expect(after.items.at(-1)).toEqual(pending)
          expect(after.items.length).toBe(budget === 1 ? 1 : 5 + n)
        }
        const withCredential = yield* Effect.orDie(reads.first({ ...run!, agent_revision_id: revision.id }, 1))
        expect(withCredential.revision?.credential_ciphertext).toBeInstanceOf(Uint8Array)
      }).pipe(Effect.scoped)
  )
})
