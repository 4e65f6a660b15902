/**
 * A customer's webhook receiver for end-to-end tests: real HTTP on 127.0.0.1, keeping every request
 * it gets (the raw body and the headers), answering as its knob says (a status, a redirect, or
 * never), and verifying deliveries with the `standardwebhooks` package as a customer would.
 */
import { Clock, Effect } from "effect"
import { createServer, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

export interface Received {
  readonly path: string
  readonly headers: Record<string, string>
  readonly body: string
}

/** How the receiver answers: a status, a redirect to `location`, or no answer at all. */
export type Answer = number | { readonly redirect: string } | "hang"

export interface Receiver {
  readonly url: string
  readonly received: Array<Received>
  /** the answers to the next requests, in order; then `otherwise` */
  readonly script: Array<Answer>
  otherwise: Answer
  /** requests not answered yet ("hang") */
  readonly hanging: () => number
  /** answers every hanging request with 200 */
  readonly release: () => void
}

const answer = (res: ServerResponse, a: Answer) => {
  if (a === "hang") return
  if (typeof a === "number") {
    res.writeHead(a, { "content-type": "text/plain" })
    return res.end(a >= 200 && a < 300 ? "ok" : "no")
  }
  res.writeHead(302, { location: a.redirect })
  res.end()
}

/** A receiver answering `otherwise` (200 by default); closed with the scope. */
export const startReceiver = (otherwise: Answer = 200, port = 0) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const hanging = new Set<ServerResponse>()
      const received: Array<Received> = []
      const script: Array<Answer> = []
      const receiver: Receiver = {
        url: "",
        received,
        script,
        otherwise,
        hanging: () => hanging.size,
        release: () => {
          for (const res of hanging) answer(res, 200)
          hanging.clear()
        }
      }
      const server = createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (c: Buffer) => chunks.push(c))
        req.on("end", () => {
          const headers: Record<string, string> = {}
          for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers[k] = v
          received.push({ path: req.url ?? "/", headers, body: Buffer.concat(chunks).toString("utf8") })
          const a = script.shift() ?? receiver.otherwise
          if (a === "hang") {
            hanging.add(res)
            res.on("close", () => hanging.delete(res))
          }
          answer(res, a)
        })
      })
      await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
      Object.assign(receiver, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks` })
      return { receiver, server }
    }),
    ({ server }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
      )
  ).pipe(Effect.map(({ receiver }) => receiver))

/**
 * Verifies a delivery with `standardwebhooks` at `nowMs` (its timestamp tolerance is 5 minutes
 * around the receiver's clock): the parsed body, or the package's error.
 */
export const verifyAt = (secret: string, delivery: Received, nowMs: number): unknown => {
  const realNow = Date.now
  Date.now = () => nowMs
  try {
    return new Webhook(secret).verify(delivery.body, delivery.headers)
  } finally {
    Date.now = realNow
  }
}

/** Verifies at the current Clock (TestClock in `it.effect`): the parsed body; the package's error fails the test. */
export const verify = (secret: string, delivery: Received) =>
  Effect.map(Clock.currentTimeMillis, (now) => verifyAt(secret, delivery, now) as Record<string, any>)

/** Whether the delivery verifies with this secret at the current Clock. */
export const verifies = (secret: string, delivery: Received) =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    try {
      verifyAt(secret, delivery, now)
      return true
    } catch {
      return false
    }
  })
