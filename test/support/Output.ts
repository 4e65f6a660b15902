/** What the test process prints, for tests of what the service logs. */
import { Effect } from "effect"

type Writer = typeof process.stdout.write
const METHODS = ["log", "info", "warn", "error", "debug"] as const

/**
 * Records what the process prints while the scope is open (still passing it on): writes to stdout
 * and stderr, and the console's methods (which the test runner intercepts before they reach
 * stdout; Effect's default logger prints through them).
 */
export const captureOutput = (into: Array<string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const saved = {
        out: process.stdout.write,
        err: process.stderr.write,
        console: METHODS.map((m) => [m, console[m]] as const)
      }
      const tap = (original: Writer) =>
        function(this: unknown, chunk: unknown, ...rest: Array<unknown>) {
          into.push(typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8"))
          return (original as any).call(this, chunk, ...rest)
        } as Writer
      process.stdout.write = tap(saved.out)
      process.stderr.write = tap(saved.err)
      for (const [m, original] of saved.console) {
        console[m] = (...args: Array<unknown>) => {
          into.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ") + "\n")
          original.apply(console, args)
        }
      }
      return saved
    }),
    (saved) =>
      Effect.sync(() => {
        process.stdout.write = saved.out
        process.stderr.write = saved.err
        for (const [m, original] of saved.console) console[m] = original
      })
  )
