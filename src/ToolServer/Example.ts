/**
 * An example customer tool server on the SDK: a tiny orders domain on the customer's Postgres.
 *
 * - `POST /orders/get` (`get_order`, read): `{order_id}` -> `{order_id, status, amount}`
 * - `POST /refunds/create` (`create_refund`, write): `{order_id, amount}` -> `{refund_id, order_id, amount}`;
 *   refunds of an order may not add up to more than its amount (422 `refund_exceeds_order`).
 *   Reconciliation: `GET /refunds/operations/{operation_id}`.
 *
 * `startExample` serves it on 127.0.0.1:<random port> for tests, with hooks that simulate the
 * ambiguous outcomes reconciliation exists for: answer nothing after the commit (hang), reset the
 * connection after the commit, answer 500 after the commit, or hold a write inside its transaction.
 */
import { randomBytes } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"

import { SqlClient } from "@effect/sql"
import { Deferred, Effect, FiberSet, Schema, type Scope } from "effect"

import { defineOperation, makeToolServer, readRawBody, sendResponse, type ToolServer, toToolRequest } from "./Server.js"
import { makeVerifier, type VerifierConfig } from "./Verify.js"
import { ensureSchema, ToolFailure } from "./WriteLedger.js"

export const Order = Schema.Struct({ order_id: Schema.String, status: Schema.String, amount: Schema.Int })
export type Order = typeof Order.Type

export const Refund = Schema.Struct({ refund_id: Schema.String, order_id: Schema.String, amount: Schema.Int })
export type Refund = typeof Refund.Type

export const GET_ORDER_PATH = "/orders/get"
export const CREATE_REFUND_PATH = "/refunds/create"
export const REFUND_RECONCILIATION_PATH = "/refunds/operations/{operation_id}"

/** Orders present unless `orders` says otherwise. */
export const DEFAULT_ORDERS: ReadonlyArray<Order> = [
  { order_id: "o_1", status: "paid", amount: 5000 },
  { order_id: "o_2", status: "shipped", amount: 1200 }
]

const orderNotFound = (orderId: string) => new ToolFailure({ code: "order_not_found", message: `no order ${orderId}`, status: 404 })

/** The orders and refunds tables plus `tool_operations`, and the seed orders. */
export const ensureExampleSchema = (orders: ReadonlyArray<Order> = DEFAULT_ORDERS) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* ensureSchema
    yield* sql`CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, status text NOT NULL, amount integer NOT NULL)`
    yield* sql`
      CREATE TABLE IF NOT EXISTS refunds (
        refund_id text PRIMARY KEY,
        order_id text NOT NULL REFERENCES orders (order_id),
        amount integer NOT NULL,
        operation_id text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`
    for (const order of orders) {
      yield* sql`INSERT INTO orders ${sql.insert(order)} ON CONFLICT (order_id) DO NOTHING`
    }
  }).pipe(Effect.orDie)

/** Test hooks; each arms the NEXT write only. */
export interface ExampleHooks {
  /**
   * What the next write that commits an outcome (200, or a stored 404/422 failure) does instead of answering:
   * `hang` (keep the connection open, answer nothing), `reset` (close the connection),
   * `error_500` (answer 500 although the outcome is committed).
   */
  readonly afterNextCommit: (behaviour: "hang" | "reset" | "error_500") => void
  /**
   * The next write waits inside its transaction, before commit, until `release`; `reached`
   * completes when it is waiting (reconciliation answers `pending` meanwhile).
   */
  readonly holdNextWrite: Effect.Effect<{ readonly reached: Effect.Effect<void>; readonly release: Effect.Effect<void> }>
}

export interface ExampleServer {
  /** `http://127.0.0.1:<port>` */
  readonly baseUrl: string
  readonly hooks: ExampleHooks
  /** How many times the refund write itself ran (a replay does not run it). */
  readonly writesExecuted: () => number
  /** The refund rows, oldest first, with the operation id that made each. */
  readonly refunds: Effect.Effect<ReadonlyArray<Refund & { readonly operation_id: string }>>
}

export interface ExampleOptions extends Omit<VerifierConfig, "keys"> {
  readonly orders?: ReadonlyArray<Order>
  /** The base URL audiences derive from; default the listening URL. */
  readonly publicBaseUrl?: string
}

/** Test hooks run inside a refund write: when it starts, and just before its transaction commits. */
export interface WriteHooks {
  readonly onStart?: Effect.Effect<void>
  readonly beforeCommit?: Effect.Effect<void>
}

/** The example's operations. */
export const exampleOperations = (hooks: WriteHooks = {}) => [
  defineOperation({
    name: "get_order",
    effect: "read",
    path: GET_ORDER_PATH,
    input: Schema.Struct({ order_id: Schema.String }),
    output: Order,
    handler: ({ order_id }) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* Effect.orDie(sql<Order>`SELECT order_id, status, amount FROM orders WHERE order_id = ${order_id}`)
        return rows[0] ?? (yield* orderNotFound(order_id))
      })
  }),
  defineOperation({
    name: "create_refund",
    effect: "write",
    path: CREATE_REFUND_PATH,
    reconciliationPath: REFUND_RECONCILIATION_PATH,
    input: Schema.Struct({ order_id: Schema.String, amount: Schema.Int.pipe(Schema.positive()) }),
    output: Refund,
    handler: ({ amount, order_id }, invocation) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* hooks.onStart ?? Effect.void
        const [order] = yield* sql<Order>`SELECT order_id, status, amount FROM orders WHERE order_id = ${order_id} FOR UPDATE`
        if (order === undefined) return yield* orderNotFound(order_id)
        const refund = { refund_id: `rf_${randomBytes(8).toString("hex")}`, order_id, amount }
        // inserted before the check, so a refused refund proves the savepoint rolled it back
        yield* sql`INSERT INTO refunds ${sql.insert({ ...refund, operation_id: invocation.operationId! })}`
        const totals = yield* sql<{ total: number }>`
          SELECT coalesce(sum(amount), 0)::int AS total FROM refunds WHERE order_id = ${order_id}`
        if ((totals[0]?.total ?? 0) > order.amount) {
          return yield* new ToolFailure({ code: "refund_exceeds_order", message: "refunds would exceed the order amount" })
        }
        yield* hooks.beforeCommit ?? Effect.void
        return refund
      }).pipe(Effect.catchTag("SqlError", Effect.die))
  })
]

type AfterCommit = "hang" | "reset" | "error_500" | undefined

/** The example server on 127.0.0.1:<random port>, on the `SqlClient` in context, for the scope. */
export const startExample = (
  options: ExampleOptions
): Effect.Effect<ExampleServer, never, Scope.Scope | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* ensureExampleSchema(options.orders)

    let writes = 0
    let afterCommit: AfterCommit
    let hold: { reached: Deferred.Deferred<void>; release: Deferred.Deferred<void> } | undefined
    const beforeCommit = Effect.suspend(() => {
      const held = hold
      hold = undefined
      return held ? Effect.zipRight(Deferred.succeed(held.reached, undefined), Deferred.await(held.release)) : Effect.void
    })

    const sockets = new Set<Socket>()
    let server: ToolServer<SqlClient.SqlClient> | undefined
    const run = yield* FiberSet.makeRuntime<SqlClient.SqlClient>()
    const listener = (req: IncomingMessage, res: ServerResponse) => {
      readRawBody(req, 1024 * 1024).then((raw) => {
        if (raw === undefined || server === undefined) return res.destroy()
        const isWrite = req.method === "POST" && req.url?.split("?")[0] === CREATE_REFUND_PATH
        run(server.handle(toToolRequest(req, raw))).addObserver((exit) => {
          if (exit._tag !== "Success") return res.destroy()
          const response = exit.value
          const behaviour = isWrite && [200, 404, 422].includes(response.status) ? afterCommit : undefined
          if (behaviour !== undefined) afterCommit = undefined
          if (behaviour === "hang") return
          if (behaviour === "reset") return req.socket.destroy()
          if (behaviour === "error_500") {
            return sendResponse(res, { status: 500, body: { error: { code: "internal_error", message: "injected" } } })
          }
          sendResponse(res, response)
        })
      }, () => res.destroy())
    }

    const http = createServer(listener)
    http.on("connection", (socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        http.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          for (const socket of sockets) socket.destroy()
          http.close(() => resume(Effect.void))
        })
    )
    const baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
    server = makeToolServer({
      verifier: makeVerifier(options),
      publicBaseUrl: options.publicBaseUrl ?? baseUrl,
      operations: exampleOperations({ onStart: Effect.sync(() => void writes++), beforeCommit })
    })

    return {
      baseUrl,
      hooks: {
        afterNextCommit: (behaviour) => {
          afterCommit = behaviour
        },
        holdNextWrite: Effect.gen(function*() {
          const reached = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          hold = { reached, release }
          return { reached: Deferred.await(reached), release: Effect.asVoid(Deferred.succeed(release, undefined)) }
        })
      },
      writesExecuted: () => writes,
      refunds: Effect.orDie(sql<Refund & { operation_id: string }>`
        SELECT refund_id, order_id, amount, operation_id FROM refunds ORDER BY created_at, refund_id`)
    } satisfies ExampleServer
  })
