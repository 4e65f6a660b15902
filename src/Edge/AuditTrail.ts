/**
 * What the request pipeline writes to the audit log (D16), and when:
 *   - a `/v1` mutation of an authenticated key: one entry with the status it answered. Kept (2xx,
 *     404, 409, 410 stored for its Idempotency-Key), it is written in the mutation's transaction
 *     beside the stored response, so both are durable or neither is; refused or rolled back (400,
 *     403, a 409 of the gate, 500...), it is written on its own after the rollback. A replay writes
 *     none: the mutation happened once. A mutation the cell's rate limit refused (429) writes none.
 *   - a failed authentication (401) whose secret is a key of an environment (revoked, expired, of
 *     an environment being deleted): one entry there, on its own, at most one a minute per key
 *     (D20, `Auth.refusedKey`); any other failure (a secret that is no key's, whatever its prefix)
 *     has no environment to write to and is only logged.
 *   - an operator request about an environment (`/operator/v1`, its path's or the one its handler
 *     names): one entry with actor `operator`, in the action's transaction when it changes something.
 * An entry holds the operation (`action`), who, the resource, the request id, the status and the
 * client address: never a body, a header or a secret.
 */
import { type HttpServerResponse } from "@effect/platform"
import type { Statement } from "@effect/sql"
import { Effect } from "effect"

import { Audit, type AuditRecord } from "../Audit.js"
import type { Principal } from "../Kernel/Principal.js"
import { Auth } from "../Platform.js"
import type { Route } from "./Routes.js"
import type { RequestState } from "./UnitOfWork.js"

/** What the route of a request tells its entries. */
export interface Trail {
  /** the operationId */
  readonly action: string
  readonly method: string
  readonly route: Route
  readonly params: Record<string, string>
  readonly ip: string | null
}

/** Who an entry is of: the cell it is written to and the actor. */
export type Who = Pick<AuditRecord, "cell" | "actor" | "keyId">

/** A client address as it is shown (an IPv4 peer of a dual-stack socket without its `::ffff:`). */
export const ipOf = (address: string): string | null =>
  address === "unknown" ? null : address.replace(/^::ffff:(\d{1,3}(\.\d{1,3}){3})$/i, "$1")

export const trailOf = (
  match: { readonly operation: string; readonly route: Route; readonly params: Record<string, string> },
  method: string,
  address: string
): Trail => ({ action: match.operation, method, route: match.route, params: match.params, ip: ipOf(address) })

/** `api-keys` -> `api_key`, `deliveries` -> `delivery`. */
const singular = (segment: string) => segment.replaceAll("-", "_").replace(/ies$/, "y").replace(/s$/, "")

/** The last resource the path names: `.../runs/{run_id}/cancel` -> `{run, run_...}`; P itself -> `{environment, sandbox}`. */
const pathResource = (trail: Trail): AuditRecord["resource"] | undefined => {
  for (let i = trail.route.params.length - 1; i >= 0; i--) {
    const name = trail.route.params[i]
    const id = name === undefined ? undefined : trail.params[name]
    if (name === undefined || id === undefined) continue
    const before = i > 0 ? trail.route.segments[i - 1] : null
    return { type: typeof before === "string" ? singular(before) : name.replace(/_id$/, ""), id }
  }
  return undefined
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)

/** The resource an answer is: its `data` (or, on the operator plane, the bare object) with `object` and `id`. */
const answeredResource = (body: unknown): AuditRecord["resource"] | undefined => {
  const data = isRecord(body) && isRecord(body["data"]) ? body["data"] : body
  return isRecord(data) && typeof data["object"] === "string" && typeof data["id"] === "string"
    ? { type: data["object"], id: data["id"] }
    : undefined
}

/**
 * What a request acted on: the resource it answered (a create's new one, an action's subject),
 * else the last one its path names; a DELETE's is its path's (its answer is a deletion job).
 */
export const resourceOf = (trail: Trail, body: unknown): AuditRecord["resource"] =>
  (trail.method === "DELETE" ? undefined : answeredResource(body)) ?? pathResource(trail) ??
    { type: "request", id: trail.action }

/** A response's body as text ("" when it is not held in memory, e.g. a stream). */
export const bodyText = (response: HttpServerResponse.HttpServerResponse): string =>
  response.body._tag === "Uint8Array" ? new TextDecoder().decode(response.body.body) : ""

/** A response's JSON body, parsed (undefined when it is not JSON). */
export const parsedBody = (response: HttpServerResponse.HttpServerResponse): unknown => {
  if (response.body._tag !== "Uint8Array") return undefined
  try {
    return JSON.parse(bodyText(response))
  } catch {
    return undefined
  }
}

/** A key's request: its cell, and the user it acts for (`X-Actor-Token`) or the key itself. */
export const keyHolder = (principal: Principal, state: RequestState): Who => ({
  cell: principal,
  actor: state.actingUser ?? principal.actor,
  keyId: principal.keyId
})

export const OPERATOR: Who["actor"] = { type: "operator", id: "operator" }

/**
 * The entry of an answer, with `along` (other writes of the request: its stored response, the
 * writes that ride its commit) in the same statement, which answers `reads` (the reads that ride it). Fails only as the database does: in a transaction, it fails the transaction.
 */
export const write = (
  trail: Trail,
  state: RequestState,
  who: Who,
  status: number,
  body: unknown,
  along?: ReadonlyArray<Statement.Fragment>,
  reads?: ReadonlyArray<Statement.Fragment>
) =>
  Effect.flatMap(Audit, (audit) =>
    audit.record(
      {
        ...who,
        action: trail.action,
        resource: resourceOf(trail, body),
        requestId: state.requestId,
        status,
        ip: trail.ip
      },
      along,
      reads
    ))

/** The entry of an answer, on its own (after a rollback): never changes the answer; a failure is logged. */
export const writeAlone = (trail: Trail, state: RequestState, who: Who, status: number, body: unknown) =>
  write(trail, state, who, status, body).pipe(
    Effect.catchAllCause((cause) => Effect.logWarning("an audit entry could not be written", cause))
  )

/** A response's entry on its own. */
export const writeAnswerAlone = (trail: Trail, state: RequestState, who: Who, response: HttpServerResponse.HttpServerResponse) =>
  writeAlone(trail, state, who, response.status, parsedBody(response))

/**
 * A failed authentication (401): one entry in the environment of the key its secret is, if any and
 * not audited in the last minute; otherwise a log line (no environment to write to) or nothing.
 */
export const authenticationFailed = (trail: Trail, state: RequestState, authorization: string | undefined, code: string) =>
  Effect.gen(function*() {
    const key = yield* (yield* Auth).refusedKey(authorization)
    if (key === undefined) {
      return yield* Effect.logInfo("authentication failed").pipe(
        Effect.annotateLogs({ code, operation: trail.action, ip: trail.ip ?? "unknown" })
      )
    }
    yield* writeAlone(
      trail,
      state,
      {
        cell: { tenantId: key.tenantId, environment: key.environment },
        actor: { type: "api_key", id: key.keyId },
        keyId: key.keyId
      },
      401,
      undefined
    )
  }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("a failed authentication could not be audited", cause)))
