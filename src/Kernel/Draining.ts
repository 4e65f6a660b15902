/**
 * Whether this node is stopping (issue 41): from the first moment of a shutdown `/readyz` answers
 * 503, so a load balancer stops sending before the listener closes (src/Edge/Server.ts).
 */
import { Context, type Effect } from "effect"

export class Draining extends Context.Tag("Draining")<Draining, {
  readonly draining: Effect.Effect<boolean>
}>() {}
