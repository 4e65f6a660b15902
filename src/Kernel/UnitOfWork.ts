/**
 * The request as an explicit unit of work (issue 37): everything a handler, or a service it calls,
 * may do to its request's response and transaction goes through this service, so it shows in the
 * types (`UnitOfWork` in an effect's requirements says "this touches the request's answer or defers
 * work to its commit"):
 *
 *   - `gated`: a mutation's idempotency gate (D5), passed once the request is known valid: a stored
 *     response replayed as it was (after the capability's `refine`, e.g. a `Prefer: wait` run that
 *     ended meanwhile), a 409, or the handler runs;
 *   - `setHeader`: a header of the answer (Location, Retry-After, Preference-Applied...);
 *   - `afterCommit`: work that must wait for the request's transaction to commit (a cell told to
 *     start a run must find it committed); outside a transaction it runs now;
 *   - `withCommit`: a write of the request's transaction that need not be sent on its own: it rides
 *     the transaction's last statement (its stored response and audit entry), one round trip less;
 *     outside a request's transaction, the caller writes it itself;
 *   - `readWithCommit`: a read that rides that same last statement (it sees every statement the
 *     request sent before), for what is needed once the request committed (a run's first dispatch);
 *   - `answerAfterCommit`: what may answer instead of the stored response once committed (the 200
 *     of `Prefer: wait`);
 *   - `about`: the tenant and environment an operator request is about, for its audit entry (D16),
 *     when its path does not name them;
 *   - `actingUser`: the user of the request's valid `X-Actor-Token`, resolved once by the edge.
 *
 * The HTTP edge implements it (src/Edge/UnitOfWork.ts) over the request it is serving; outside a
 * request (a run actor's commit, a background loop) it is a unit of its own: work after a commit
 * runs at once, there is no answer to shape. The kernel defines it and imports no capability.
 */
import type { HttpServerResponse } from "@effect/platform"
import type { Statement } from "@effect/sql"
import { Context, Effect, type Option } from "effect"

import type { Conflict } from "./Errors.js"
import type { CellRef } from "./Principal.js"

/**
 * An endpoint annotation: until its transaction commits, the handler has no effect outside it (it
 * reads, and writes only through the transaction; anything else waits for the commit). Its
 * idempotency gate may then pass at once, its claim of the key sent with the transaction's next
 * statement (one round trip less): when the claim fails (a replay, a 409), the handler ran for
 * nothing, its transaction is rolled back, and the request is served again with the gate first.
 */
export class GateAhead extends Context.Tag("GateAhead")<GateAhead, boolean>() {}

/** A stored response of an idempotent mutation (D5): what a retry is answered. */
export interface StoredResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

/** The user a request acts for (`X-Actor-Token`). */
export interface ActingUser {
  readonly type: "user"
  readonly id: string
}

/** How a capability reads its own stored answer on a replay (none: as it was stored). */
export type RefineReplay = (stored: StoredResponse) => Effect.Effect<Option.Option<StoredResponse>>

export interface UnitOfWorkShape {
  /**
   * Past the request's checks (tenancy, scopes, validation), a mutation passes its idempotency gate:
   * its stored response is replayed (`refine` may answer from it otherwise: none keeps it as it
   * was), a concurrent or reused key is 409, else `run` runs. A read runs `run`.
   */
  readonly gated: <A, E, R>(
    run: Effect.Effect<A, E, R>,
    refine?: RefineReplay
  ) => Effect.Effect<A | HttpServerResponse.HttpServerResponse, E | Conflict, R>
  /** Sets a header of the request's answer (names are case-insensitive). */
  readonly setHeader: (name: string, value: string) => Effect.Effect<void>
  /** Runs `effect` once the request's transaction committed; outside one, now. */
  readonly afterCommit: (effect: Effect.Effect<void>) => Effect.Effect<void>
  /**
   * Writes `write` (an INSERT, UPDATE or DELETE; its own snapshot, after every statement the request
   * sent before) with the request's transaction, in its last statement; false outside one (the
   * caller sends it itself). A transaction that is rolled back writes none of it.
   */
  readonly withCommit: (write: Statement.Fragment) => Effect.Effect<boolean>
  /**
   * Reads `read` (a query of at most one row) in the request's transaction's last statement: it
   * sees every statement the request sent before, not the writes of that last statement. Answers a
   * function that gives the row (as JSON, `to_jsonb`) once that statement ran, undefined before or
   * when it found none; undefined outside a request's transaction (the caller reads it itself).
   */
  readonly readWithCommit: (read: Statement.Fragment) => Effect.Effect<(() => unknown) | undefined>
  /** Once committed, `continuation` may answer instead of the stored response (none: it stands). */
  readonly answerAfterCommit: (
    continuation: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>>
  ) => Effect.Effect<void>
  /** Names the environment an operator request is about, for its audit entry. */
  readonly about: (cell: CellRef) => Effect.Effect<void>
  /** The user of the request's valid actor token, if the edge resolved one. */
  readonly actingUser: Effect.Effect<ActingUser | undefined>
  /**
   * Who an operator request acts as, once the edge resolved its token: `operator` (the shared
   * token) or an operator account's id (issue 39); undefined before that, or outside one.
   */
  readonly operator: Effect.Effect<string | undefined>
}

export class UnitOfWork extends Context.Tag("UnitOfWork")<UnitOfWork, UnitOfWorkShape>() {}

/** Sets a header of the current request's answer. */
export const setResponseHeader = (name: string, value: string): Effect.Effect<void, never, UnitOfWork> =>
  Effect.flatMap(UnitOfWork, (work) => work.setHeader(name, value))

/** Runs `effect` once the current request's transaction committed (now outside one). */
export const afterCommit = (effect: Effect.Effect<void>): Effect.Effect<void, never, UnitOfWork> =>
  Effect.flatMap(UnitOfWork, (work) => work.afterCommit(effect))

/** Writes `write` with the current request's transaction, in its last statement: false outside one. */
export const withCommit = (write: Statement.Fragment): Effect.Effect<boolean, never, UnitOfWork> =>
  Effect.flatMap(UnitOfWork, (work) => work.withCommit(write))

/** Reads `read` in the current request's transaction's last statement (see `UnitOfWorkShape.readWithCommit`). */
export const readWithCommit = (read: Statement.Fragment): Effect.Effect<(() => unknown) | undefined, never, UnitOfWork> =>
  Effect.flatMap(UnitOfWork, (work) => work.readWithCommit(read))

/** Once committed, `continuation` may answer instead of the stored response. */
export const answerAfterCommit = (
  continuation: Effect.Effect<Option.Option<HttpServerResponse.HttpServerResponse>>
): Effect.Effect<void, never, UnitOfWork> => Effect.flatMap(UnitOfWork, (work) => work.answerAfterCommit(continuation))

/** Names the environment the current operator request is about (its audit entry). */
export const auditAbout = (cell: CellRef): Effect.Effect<void, never, UnitOfWork> => Effect.flatMap(UnitOfWork, (work) => work.about(cell))

/** Who the current operator request acts as, once the edge resolved its token (see `UnitOfWorkShape.operator`). */
export const actingOperator: Effect.Effect<string | undefined, never, UnitOfWork> = Effect.flatMap(UnitOfWork, (work) => work.operator)

/** The user the current request acts for, if any. */
export const actingUser: Effect.Effect<ActingUser | undefined, never, UnitOfWork> = Effect.flatMap(UnitOfWork, (work) => work.actingUser)
