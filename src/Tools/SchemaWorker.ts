/**
 * The schema worker: a `worker_threads` thread started by `JsonSchemas.ts` that runs the
 * synchronous checks of `SchemaCheck.ts` off the service's main thread, one request at a time,
 * so that the main thread can terminate it at the deadline and lose nothing but this worker's
 * cache of compiled validators.
 *
 * Protocol, one reply per request, in order: `check` a schema for registration; `validate` a
 * value by key (the schema is sent only when the main thread does not know this worker has it;
 * `missing` asks for it); `size` of the validator cache. It posts `ready` once loaded. Its cache
 * bound comes in `workerData.cacheLimit`.
 */
import { parentPort, workerData } from "node:worker_threads"

import { message, MISSING, schemaProblem, validatorCache } from "./SchemaCheck.js"

export type Op =
  | { readonly op: "check"; readonly schema: unknown }
  | { readonly op: "validate"; readonly key: string; readonly schema?: object; readonly value: unknown }
  | { readonly op: "size" }

export type Request = Op & { readonly id: number }

export type Reply =
  | { readonly id: number; readonly problem?: string; readonly size?: number; readonly missing?: true }
  | { readonly ready: true }

export interface Data {
  readonly cacheLimit: number
}

const port = parentPort
if (port !== null) {
  const validators = validatorCache((workerData as Data).cacheLimit)

  const answer = (request: Request): Reply => {
    switch (request.op) {
      case "check": {
        const problem = schemaProblem(request.schema)
        return problem === undefined ? { id: request.id } : { id: request.id, problem }
      }
      case "validate": {
        const problem = validators.validate(request.key, request.schema, request.value)
        if (problem === MISSING) return { id: request.id, missing: true }
        return problem === undefined ? { id: request.id } : { id: request.id, problem }
      }
      case "size":
        return { id: request.id, size: validators.size() }
    }
  }

  port.on("message", (request: Request) => {
    let reply: Reply
    try {
      reply = answer(request)
    } catch (e) {
      reply = { id: request.id, problem: `validation failed: ${message(e)}` }
    }
    port.postMessage(reply)
  })
  port.postMessage({ ready: true } satisfies Reply)
}
