/**
 * The destination guard as a service (D10): the operator's `DESTINATION_ALLOWLIST`, parsed once at
 * start (a malformed entry stops the start), the registration check (400 `destination_refused`),
 * and the one HTTP dispatcher every tool call goes through (it checks the address each socket
 * actually connects to and follows no redirects).
 */
import { Effect, Layer } from "effect"

import { AppConfig } from "../Config/AppConfig.js"
import { invalid } from "../Kernel/Errors.js"
import * as Destination from "./Guard.js"

/** The guard with `raw` as the allowlist (a malformed entry is a defect: it stops the start). */
const make = (raw: string) =>
  Effect.gen(function*() {
    const allowlist = yield* Effect.try({
      try: () => Destination.parseAllowlist(raw),
      catch: (e) => new Error(`DESTINATION_ALLOWLIST: ${e instanceof Error ? e.message : String(e)}`)
    }).pipe(Effect.orDie)
    const { lookup } = yield* Destination.Resolver
    const dispatcher = Destination.guardedDispatcher(allowlist, { lookup })
    yield* Effect.addFinalizer(() => Effect.promise(() => dispatcher.close()).pipe(Effect.ignore))

    /** A URL a connection (or identity provider, or model server) may be registered with, else 400 `destination_refused`. */
    const checkRegistration = (url: string, param: string) =>
      Effect.gen(function*() {
        const checked = Destination.checkUrl(url, allowlist)
        if (!checked.ok) return yield* invalid("destination_refused", `${param}: ${checked.reason}`, param)
        const reason = yield* Effect.promise(() => Destination.resolveAndCheck(checked.url.hostname, allowlist, lookup))
        if (reason !== undefined) return yield* invalid("destination_refused", `${param}: ${reason}`, param)
        return checked.url
      })

    /**
     * Another guarded dispatcher with its own limits (e.g. a model server's answers may be larger
     * than a tool's), closed with the caller's scope.
     */
    const dispatcherWith = (options: { readonly maxResponseSize: number }) =>
      Effect.acquireRelease(
        Effect.sync(() => Destination.guardedDispatcher(allowlist, { lookup, ...options })),
        (d) => Effect.promise(() => d.close()).pipe(Effect.ignore)
      )

    /**
     * For an operator's review (issue 39): the addresses a URL's host resolves to now, each with its
     * class (`public`, `allowlisted`, or the class the guard refuses). Operators see the addresses;
     * a customer never does (D20).
     */
    const addressClasses = (url: string) =>
      Effect.promise(async () => {
        const host = Destination.normalizeHost(new URL(url).hostname)
        if (allowlist.hosts.has(host)) return [{ address: host, class: "allowlisted host" }]
        const addresses = await lookup(host).catch(() => [])
        const classOf = (a: string) => {
          const refused = Destination.refusedClass(a, allowlist)
          return refused !== undefined ? refused : Destination.refusedClass(a) === undefined ? "public" : "allowlisted"
        }
        return addresses.length === 0 ? [{ address: host, class: "does not resolve" }] : addresses.map((a) => ({
          address: a.address,
          class: classOf(a.address)
        }))
      })

    return { allowlist, dispatcher, dispatcherWith, checkRegistration, addressClasses } as const
  })

export class Destinations extends Effect.Service<Destinations>()("Destinations", {
  scoped: Effect.flatMap(AppConfig, (config) => make(config.tools.destinationAllowlist))
}) {
  /** The guard with this allowlist, without AppConfig (tests of single services). */
  static readonly layerWith = (allowlist: string): Layer.Layer<Destinations> =>
    Layer.scoped(Destinations, Effect.map(make(allowlist), Destinations.make))
}
