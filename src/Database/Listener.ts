/**
 * LISTEN/NOTIFY on a connection that notices when it is gone (issue 20).
 *
 * `@effect/sql-pg`'s `listen` keeps one connection for as long as anyone listens and ignores its
 * errors: once that connection is lost (Postgres restarted, the backend terminated, a proxy
 * timeout), its streams neither end nor receive anything again, and nothing reconnects. Every
 * caller then depends on its own polling. Here one connection per process carries every channel.
 * When it ends or errors, fails the periodic probe (a `SELECT 1` on the same socket: a half-open
 * TCP connection answers nothing) or does not connect in time, it is replaced: connect again
 * (backoff from 100 ms to 5 s, in real time), LISTEN on every channel, then tell every listener
 * `Listening`.
 *
 * `Listening` means: notifications of this channel arrive from now on; anything committed before
 * it may have gone unannounced. A listener answers it by reading what it may have missed, once,
 * instead of polling on a timer. The first `Listening` comes once LISTEN is active for the
 * listener's channel, so a listener that reads after it misses nothing.
 */
import { createRequire } from "node:module"

import { Context, Effect, Layer, Redacted, type Scope, Stream } from "effect"

import { Listeners } from "../Kernel/Listeners.js"
import { realPause } from "../Kernel/RealTime.js"

/** What a listener gets: LISTEN is active (read what may have been missed), or a payload. */
export type Notice = { readonly _tag: "Listening" } | { readonly _tag: "Notification"; readonly payload: string }

const LISTENING: Notice = { _tag: "Listening" }

export class Notifications extends Context.Tag("Notifications")<Notifications, {
  /** The channel's notices for as long as the stream runs (it never fails). */
  readonly listen: (channel: string) => Stream.Stream<Notice>
  /**
   * `handler` told the channel's notices, called in the connection's callback (so it must only
   * take note, or start work of its own), until the scope closes: `listen` without a stream and
   * its fiber, for a busy channel's one consumer (the run events' bus).
   */
  readonly onNotice: (channel: string, handler: (notice: Notice) => void) => Effect.Effect<void, never, Scope.Scope>
  /** How many times a LISTEN connection was made (1 after the first; for tests and logs). */
  readonly connections: () => number
}>() {}

/** What is used here of a `pg` client. */
interface ListenClient {
  connect(): Promise<void>
  query(text: string): Promise<unknown>
  end(): Promise<void>
  on(event: "notification", listener: (msg: { channel: string; payload?: string }) => void): void
  on(event: "error" | "end", listener: (error?: Error) => void): void
}
const Pg = createRequire(import.meta.url)("pg") as {
  readonly Client: new(options: {
    connectionString: string
    application_name: string
    keepAlive: boolean
    connectionTimeoutMillis: number
  }) => ListenClient
  readonly escapeIdentifier: (name: string) => string
}

interface Session {
  readonly client: ListenClient
  readonly channels: Map<string, Promise<unknown>>
  /** The last statement sent (settled when it is done, whatever its outcome). */
  last: Promise<unknown>
}

export interface ListenerOptions {
  readonly url: Redacted.Redacted
  /** How often the connection is probed. */
  readonly probeMillis: number
  /** How long a probe may take before the connection is replaced. */
  readonly probeTimeoutMillis: number
}

const BACKOFF_MIN = 100
const BACKOFF_MAX = 5_000

export const make = (options: ListenerOptions) =>
  Effect.gen(function*() {
    const handlers = new Listeners<string, (notice: Notice) => void>()
    /**
     * The live connection and the channels it listens on (a LISTEN per channel, once). Its
     * statements go one after another (`last`): `pg` queues a statement sent while another runs,
     * which it deprecates, and pg 9 refuses.
     */
    let current: Session | undefined
    let connections = 0

    const query = (session: Session, text: string) => {
      const done = session.last.then(() => session.client.query(text))
      session.last = done.catch(() => undefined)
      return done
    }

    const listenOn = (session: Session, channel: string) => {
      let done = session.channels.get(channel)
      if (done === undefined) {
        done = query(session, `LISTEN ${Pg.escapeIdentifier(channel)}`)
        session.channels.set(channel, done)
      }
      return done
    }

    /** One connection, from connect to loss; fails with why it was lost. */
    const session = Effect.async<never, Error>((resume) => {
      const client = new Pg.Client({
        connectionString: Redacted.value(options.url),
        application_name: "agent-platform-listen",
        keepAlive: true,
        // a server that accepts and never answers would otherwise hold the connect forever
        connectionTimeoutMillis: options.probeTimeoutMillis
      })
      let over = false
      let probe: ReturnType<typeof setInterval> | undefined
      /** Ends this connection once; false when it was over already. */
      const stop = () => {
        if (over) return false
        over = true
        clearInterval(probe)
        if (current?.client === client) current = undefined
        client.end().catch(() => undefined)
        return true
      }
      const lose = (error: Error) => {
        if (stop()) resume(Effect.fail(error))
      }
      client.on("error", (error) => lose(error ?? new Error("LISTEN connection error")))
      client.on("end", () => lose(new Error("LISTEN connection ended")))
      client.on("notification", (msg) => {
        if (msg.payload === undefined) return
        const notice: Notice = { _tag: "Notification", payload: msg.payload }
        for (const handler of handlers.of(msg.channel)) handler(notice)
      })
      const connected = async () => {
        await client.connect()
        if (over) return
        const session: Session = { client, channels: new Map(), last: Promise.resolve() }
        current = session
        connections++
        // probed from now on: a LISTEN that never answers is a lost connection too
        probe = setInterval(() => {
          const timer = setTimeout(() => lose(new Error("LISTEN connection probe timed out")), options.probeTimeoutMillis)
          query(session, "SELECT 1").then(() => clearTimeout(timer), (error) => lose(error))
        }, options.probeMillis)
        probe.unref()
        for (const channel of [...handlers.keys()]) await listenOn(session, channel)
        if (over) return
        for (const handler of handlers.all()) handler(LISTENING)
      }
      connected().catch((error) => lose(error instanceof Error ? error : new Error(String(error))))
      return Effect.sync(stop)
    })

    // Reconnects for as long as the process runs; the backoff starts over after each connection.
    yield* Effect.gen(function*() {
      let delay = BACKOFF_MIN
      while (true) {
        const before = connections
        const lost = yield* Effect.flip(session)
        if (connections > before) delay = BACKOFF_MIN
        yield* Effect.logWarning("LISTEN connection lost; reconnecting", lost)
        yield* realPause(delay)
        delay = Math.min(delay * 2, BACKOFF_MAX)
      }
    }).pipe(Effect.interruptible, Effect.forkScoped)

    const onNotice = (channel: string, handler: (notice: Notice) => void) =>
      Effect.asVoid(Effect.acquireRelease(
        Effect.sync(() => {
          const remove = handlers.add(channel, handler)
          // On a live connection: LISTEN if nobody here did yet, then this listener is told.
          // Otherwise the next connection tells it.
          const session = current
          if (session !== undefined) listenOn(session, channel).then(() => handler(LISTENING), () => undefined)
          return remove
        }),
        (remove) => Effect.sync(remove)
      ))

    const listen = (channel: string): Stream.Stream<Notice> =>
      Stream.asyncPush<Notice>((emit) => onNotice(channel, (notice) => void emit.single(notice)))

    return { listen, onNotice, connections: () => connections } as const
  })

export const layer = (options: ListenerOptions) => Layer.scoped(Notifications, make(options))
