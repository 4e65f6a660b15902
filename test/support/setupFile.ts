/**
 * Runs before each test file. The suite runs files without isolation (vitest `isolate: false`:
 * each worker imports the service's modules once rather than once per file, a third of the
 * suite's time), so what a file changes in a shared module must be undone here.
 *
 * `layer(...)` of @effect/vitest 0.30 assigns its own `effect`/`scoped`/`layer` onto the shared
 * `it` object (vitest's own `it`), so a file without `layer` would inherit the previous file's
 * (without TestClock). The methods `it` had before any file ran are put back.
 */
import { it } from "@effect/vitest"

const key = Symbol.for("agent-platform/test/pristine-it")
const store = globalThis as unknown as Record<symbol, Record<string, unknown> | undefined>
const pristine = store[key] ??= { ...it } as Record<string, unknown>
Object.assign(it, pristine)
