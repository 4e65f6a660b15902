/**
 * Tenant A's flood for the noisy-neighbour benchmark (scripts/bench/neighbours.ts, issue 36), in a
 * process of its own: the bench forks this module (`--flood`, an IPC channel), so A's load
 * generation never shares the measuring process's event loop. A stays within every limit it has
 * and goes to each of them (README "Limits"), from one sandbox environment (one cell):
 *
 * - **Active runs**: `slots` (64, `CELL_MAX_ACTIVE_RUNS`) runs in flight at all times, each in a new
 *   conversation, each making `toolCalls` calls of a reviewed `customer_https` read operation on a
 *   tool server of this process (127.0.0.1) that answers after `toolSeconds`; a new run starts as
 *   one ends (its end is its stream's terminal event).
 * - **Event streams**: `streamsPerRun` (2) streams on each run: 128 (`CELL_MAX_STREAMS`), 16 per key
 *   (`ACTOR_MAX_STREAMS`) over 8 keys. Each frame of an event committed after its stream opened is
 *   a commit -> SSE sample (the event's `created_at` to the chunk's arrival here).
 * - **Requests at the rate limit**: every request of A counts toward one pacer; `GET run` and
 *   `GET runs` fill A's requests up to `offeredRps` (73/s: the cell limit of 60/s and about 13/s
 *   more, refused 429 `rate_limited`). Whatever is refused is tried again after its `Retry-After`
 *   (at most 1 s), as a client would.
 * - **Files**: one 25 MiB upload and one 25 MiB download at a time, each in a loop, timed.
 * - **Webhooks**: `endpoints` (16, the `webhook_endpoints` quota) endpoints subscribed to A's runs'
 *   terminal events, on a receiver here that never answers (the service gives up after 15 s).
 * - **Schedules**: `schedules` schedules firing every second (the operator lowered the environment's
 *   `schedule_min_interval_seconds` to 1), each run a one-step answer.
 *
 * Protocol (process.send): the bench sends `config`; this process starts its servers, registers the
 * connection and asks for its `review` (the operator's, done by the bench), provisions the rest,
 * measures one A run, one upload and one download on the idle service and answers `ready`. `go`
 * starts the flood; `report {from, to}` answers A's figures over that window (ms since the epoch);
 * `stop` ends the flood and the process.
 */
import * as Sse from "@effect/experimental/Sse"
import { randomBytes, randomUUID } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { setTimeout as sleep } from "node:timers/promises"

export interface FloodConfig {
  readonly base: string
  /** `/v1/tenants/{t}/environments/sandbox` */
  readonly P: string
  /** A's keys: slot i uses keys[i % keys.length] (16 streams per key at most) */
  readonly keys: ReadonlyArray<string>
  readonly slots: number
  readonly streamsPerRun: number
  readonly toolCalls: number
  readonly toolSeconds: number
  readonly offeredRps: number
  readonly endpoints: number
  readonly schedules: number
  readonly fileBytes: number
}

export type ToFlood =
  | { readonly type: "config"; readonly config: FloodConfig }
  | { readonly type: "reviewed" }
  | { readonly type: "go" }
  | { readonly type: "report"; readonly from: number; readonly to: number }
  | { readonly type: "stop" }

export type FromFlood =
  | { readonly type: "review"; readonly connectionId: string }
  | { readonly type: "ready"; readonly idle: IdleFigures }
  | { readonly type: "report"; readonly figures: FloodFigures }
  | { readonly type: "failed"; readonly message: string }

/** A's figures on the idle service, before the bench starts: one of each, alone. */
export interface IdleFigures {
  readonly runMs: number
  readonly uploadMs: number
  readonly downloadMs: number
}

/** p50 / p99 / mean / max and the count of a sample. */
export interface Summary {
  readonly n: number
  readonly p50: number
  readonly p99: number
  readonly mean: number
  readonly max: number
}

export const summarize = (xs: ReadonlyArray<number>): Summary => {
  const sorted = [...xs].sort((a, b) => a - b)
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN
  return {
    n: sorted.length,
    p50: at(0.5),
    p99: at(0.99),
    mean: sorted.length === 0 ? NaN : sorted.reduce((a, b) => a + b, 0) / sorted.length,
    max: sorted.length === 0 ? NaN : sorted[sorted.length - 1]!
  }
}

/** A's figures over a window: rates per second of the window, samples of what was open. */
export interface FloodFigures {
  readonly seconds: number
  /** every request of A: sent, answered 2xx, refused 429 (by error code), anything else */
  readonly requests: {
    readonly sent: number
    readonly answered: number
    readonly refused: Record<string, number>
    readonly other: Record<string, number>
  }
  /** the pacer's GETs alone: sent, answered, refused per second; answered latency */
  readonly gets: { readonly sent: number; readonly answered: number; readonly refused: number; readonly latency: Summary }
  readonly runs: {
    readonly completed: number
    readonly failed: number
    /** runs of this process in flight (created, not seen ending), sampled */
    readonly inFlight: Summary
    /** creation -> terminal event seen, of the runs that ended in the window */
    readonly duration: Summary
  }
  readonly toolCalls: { readonly answered: number; readonly inFlight: Summary }
  readonly streams: { readonly open: Summary; readonly refused: number; readonly lag: Summary }
  readonly uploads: Transfers
  readonly downloads: Transfers
  readonly webhooks: { readonly received: number; readonly heldAtEnd: number }
  readonly schedules: { readonly fired: number; readonly expected: number }
  /** this process's own event loop delay (ms): a high one would make its lag figures its own */
  readonly loopDelay: { readonly p50: number; readonly p99: number }
}

/** Transfers of 25 MiB: those that ended in the window (times in ms), refused or failed, and those still going at its end. */
export interface Transfers {
  readonly completed: Summary
  /** 429: tried again after its Retry-After */
  readonly refused: number
  /** anything else but 2xx, or cut short */
  readonly failed: number
  readonly inProgressMs: ReadonlyArray<number>
}

const TERMINAL_EVENTS = new Set(["run.succeeded", "run.failed", "run.cancelled", "run.expired", "run.interrupted"])
const TERMINAL_STATUSES = new Set(["succeeded", "failed", "cancelled", "expired", "interrupted", "outcome_unknown"])

type Kind = "setup" | "conversation" | "run" | "stream" | "get" | "poll" | "upload" | "download"

interface Sent {
  readonly kind: Kind
  readonly at: number
  readonly ms: number
  readonly status: number
  /** the error code of a 4xx/5xx (`rate_limited`, `stream_limit_reached`...), "network" without an answer */
  readonly code: string | undefined
}

export interface Answer {
  readonly status: number
  readonly body: any
  readonly retryAfter: number
}

/** A JSON request with a key (an Idempotency-Key on each POST): its answer; status 0 when none came. */
export const request = async (
  url: string,
  method: string,
  key: string,
  body?: unknown,
  headers: Record<string, string> = {}
): Promise<Answer> => {
  try {
    const res = await fetch(url, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...(method === "POST" ? { "idempotency-key": randomUUID() } : {}),
        ...headers
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    const text = await res.text()
    return {
      status: res.status,
      body: text.startsWith("{") ? JSON.parse(text) : undefined,
      retryAfter: Number(res.headers.get("retry-after") ?? 1)
    }
  } catch {
    return { status: 0, body: undefined, retryAfter: 1 }
  }
}

/** After a refusal: its Retry-After (at most 1 s), jittered so that retries do not come in waves. */
export const backoff = (retryAfter: number) => sleep(Math.min(1000, retryAfter * 1000) * (0.5 + Math.random() / 2))

/** `f` until it answers 2xx (its body): 429, 503 and no answer are tried again after a backoff; anything else throws. */
export const retrying = async (f: () => Promise<Answer>, what: string) => {
  for (;;) {
    const answer = await f()
    if (answer.status >= 200 && answer.status < 300) return answer.body
    if (answer.status !== 429 && answer.status !== 503 && answer.status !== 0) {
      throw new Error(`${what}: ${answer.status} ${JSON.stringify(answer.body)}`)
    }
    await backoff(answer.retryAfter)
  }
}

class Stopped extends Error {}

const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })

export const flood = (config: FloodConfig, send: (message: FromFlood) => void) => {
  const { P, base, keys } = config
  const sent: Array<Sent> = []
  let stopping = false
  let goAt = 0
  /** requests of A issued so far (counted when sent, answered or not): what the pacer tops up */
  let issued = 0
  let issuedAtGo = 0

  const record = (kind: Kind, at: number, status: number, code: string | undefined) =>
    sent.push({ kind, at, ms: Date.now() - at, status, code })

  /** One request of A's, recorded; never throws (status 0: no answer). */
  const api = async (kind: Kind, method: string, path: string, key: string, body?: unknown): Promise<Answer> => {
    issued++
    const at = Date.now()
    const answer = await request(`${base}${P}${path}`, method, key, body)
    record(
      kind,
      at,
      answer.status,
      answer.status === 0 ? "network" : answer.status >= 400 ? answer.body?.error?.code ?? String(answer.status) : undefined
    )
    return answer
  }

  /** `api` until 2xx (429, 503 and no answer tried again; anything else fails); once stopping, a Stopped. */
  const must = (kind: Kind, method: string, path: string, key: string, body?: unknown) =>
    retrying(() => {
      if (stopping && kind !== "setup") throw new Stopped()
      return api(kind, method, path, key, body)
    }, `${method} ${path}`)
  const setup = (method: string, path: string, body?: unknown) => must("setup", method, path, keys[0]!, body)

  // ---- the tool server, the webhook receiver that never answers -------------------------------

  let toolInFlight = 0
  const toolAnswered: Array<number> = []
  const tools = http.createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      toolInFlight++
      setTimeout(() => {
        toolInFlight--
        toolAnswered.push(Date.now())
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ order_id: "o-1", status: "shipped" }))
      }, config.toolSeconds * 1000)
    })
  })
  const hooksReceived: Array<number> = []
  const held = new Set<http.ServerResponse>()
  const hooks = http.createServer((req, res) => {
    req.resume()
    hooksReceived.push(Date.now())
    held.add(res)
    res.on("close", () => held.delete(res))
  })
  const listen = (server: http.Server) =>
    new Promise<string>((resolve) =>
      server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`))
    )

  // ---- streams --------------------------------------------------------------------------------

  let streamsOpen = 0
  /** commit -> frame samples: when the frame came and its lag (ms) */
  const lags: Array<{ at: number; ms: number }> = []

  /**
   * Opens a run's event stream (a 429 tried again, 5 times at most): calls `onEvent` with each
   * event; resolves once it ended (true) or could not be opened (false).
   */
  const stream = async (runId: string, key: string, onEvent: (event: any) => void): Promise<boolean> => {
    for (let attempt = 0; attempt < 5 && !stopping; attempt++) {
      issued++
      const at = Date.now()
      const opened = await new Promise<{ status: number; code?: string; retryAfter: number; done?: Promise<void> }>((resolve) => {
        const req = http.get(`${base}${P}/runs/${runId}/events/stream`, {
          agent,
          headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" }
        }, (res) => {
          res.setEncoding("utf8")
          const status = res.statusCode ?? 0
          if (status !== 200) {
            let body = ""
            res.on("data", (chunk: string) => (body += chunk))
            res.on("end", () => {
              const code = (() => {
                try {
                  return JSON.parse(body).error.code as string
                } catch {
                  return String(status)
                }
              })()
              resolve({ status, code, retryAfter: Number(res.headers["retry-after"] ?? 1) })
            })
            return
          }
          const openedAt = Date.now()
          streamsOpen++
          let receivedAt = 0
          const parser = Sse.makeParser((frame) => {
            if (frame._tag !== "Event") return
            const event = JSON.parse(frame.data)
            const committed = Date.parse(event.created_at)
            if (committed >= openedAt) lags.push({ at: receivedAt, ms: receivedAt - committed })
            onEvent(event)
          })
          res.on("data", (chunk: string) => {
            receivedAt = Date.now()
            parser.feed(chunk)
          })
          const done = new Promise<void>((settle) => {
            let ended = false
            const end = () => {
              if (ended) return
              ended = true
              streamsOpen--
              settle()
            }
            res.once("end", end)
            res.once("close", end)
            res.once("error", end)
          })
          const close = () => req.destroy()
          closers.add(close)
          void done.then(() => closers.delete(close))
          resolve({ status, retryAfter: 0, done })
        })
        req.on("error", () => resolve({ status: 0, code: "network", retryAfter: 1 }))
      })
      record("stream", at, opened.status, opened.code)
      if (opened.done !== undefined) {
        await opened.done
        return true
      }
      await backoff(opened.retryAfter)
    }
    return false
  }
  const closers = new Set<() => void>()

  // ---- runs -----------------------------------------------------------------------------------

  let workspaceId = ""
  let toolRevision = ""
  let textRevision = ""
  let inFlight = 0
  const runsEnded: Array<{ at: number; ms: number; ok: boolean }> = []
  const recentRuns: Array<string> = []

  /** A run in a new conversation, followed on its streams until it ends: its time and whether it succeeded. */
  const oneRun = async (key: string, streams: number) => {
    const conversation = (await must("conversation", "POST", "/conversations", key, {
      workspace_id: workspaceId,
      agent_revision_id: toolRevision
    })).data
    const run = (await must("run", "POST", `/conversations/${conversation.id}/runs`, key, { input: [{ type: "text", text: "x" }] })).data
    const created = Date.now()
    recentRuns.push(run.id)
    if (recentRuns.length > 64) recentRuns.shift()
    let terminal: string | undefined
    const opened = await Promise.all(Array.from({ length: streams }, () =>
      stream(run.id, key, (event) => {
        if (TERMINAL_EVENTS.has(event.type)) terminal ??= event.type
      })))
    // no stream told its end (none opened, or all closed early): ask until it has ended
    while (terminal === undefined && !stopping) {
      const answer = await api("poll", "GET", `/runs/${run.id}`, key)
      if (answer.status === 200 && TERMINAL_STATUSES.has(answer.body.data.status)) terminal = `run.${answer.body.data.status}`
      else await sleep(opened.some(Boolean) ? 250 : 1000)
    }
    return { ms: Date.now() - created, ok: terminal === "run.succeeded" }
  }

  const slot = async (i: number) => {
    const key = keys[i % keys.length]!
    while (!stopping) {
      inFlight++
      try {
        const run = await oneRun(key, config.streamsPerRun)
        if (!stopping) runsEnded.push({ at: Date.now(), ...run })
      } catch (e) {
        if (!(e instanceof Stopped)) throw e
      } finally {
        inFlight--
      }
    }
  }

  // ---- requests at the rate limit ------------------------------------------------------------

  let getsInFlight = 0
  let getTurn = 0
  /** Tops A's requests since `go` up to offeredRps: GET a recent run, or its events' first page, in turns. */
  const pace = () => {
    const owed = Math.floor((config.offeredRps * (Date.now() - goAt)) / 1000) - (issued - issuedAtGo)
    for (let i = 0; i < Math.min(owed, 20) && getsInFlight < 256; i++) {
      const turn = getTurn++
      const runId = recentRuns[turn % Math.max(1, recentRuns.length)]
      getsInFlight++
      const path = runId === undefined ? "/conversations?limit=10" : turn % 2 === 0 ? `/runs/${runId}` : `/runs/${runId}/events?limit=10`
      void api("get", "GET", path, keys[turn % keys.length]!)
        .finally(() => getsInFlight--)
    }
  }

  // ---- files ----------------------------------------------------------------------------------

  const bytes = randomBytes(config.fileBytes)
  let fileId = ""
  interface Transfer {
    readonly started: number
    ended?: number
    status?: number
  }
  const uploads: Array<Transfer> = []
  const downloads: Array<Transfer> = []

  const upload = async (kind: Kind = "upload") => {
    const form = new FormData()
    form.append("purpose", "knowledge")
    form.append("file", new Blob([bytes], { type: "application/octet-stream" }), "big.bin")
    issued++
    const at = Date.now()
    try {
      const res = await fetch(`${base}${P}/files`, {
        method: "POST",
        headers: { authorization: `Bearer ${keys[0]}`, "idempotency-key": randomUUID() },
        body: form
      })
      const text = await res.text()
      const body = text.startsWith("{") ? JSON.parse(text) : undefined
      record(kind, at, res.status, res.status >= 400 ? body?.error?.code ?? String(res.status) : undefined)
      return { status: res.status, id: body?.data?.id as string | undefined, retryAfter: Number(res.headers.get("retry-after") ?? 1) }
    } catch {
      record(kind, at, 0, "network")
      return { status: 0, id: undefined, retryAfter: 1 }
    }
  }

  const download = async (kind: Kind = "download") => {
    issued++
    const at = Date.now()
    try {
      const res = await fetch(`${base}${P}/files/${fileId}/content`, { headers: { authorization: `Bearer ${keys[1 % keys.length]}` } })
      let received = 0
      let code: string | undefined
      if (res.status === 200) {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) received += chunk.length
      } else {
        const text = await res.text()
        code = text.startsWith("{") ? JSON.parse(text).error?.code : undefined
      }
      // a 200 cut short counts as no answer
      const status = res.status === 200 && received !== config.fileBytes ? 0 : res.status
      record(kind, at, status, status === 200 ? undefined : status === 0 ? "short" : code ?? String(status))
      return { status, retryAfter: Number(res.headers.get("retry-after") ?? 1) }
    } catch {
      record(kind, at, 0, "network")
      return { status: 0, retryAfter: 1 }
    }
  }

  /** `f` in a loop until stopping, each transfer timed. */
  const transfers = async (into: Array<Transfer>, f: () => Promise<{ status: number; retryAfter: number }>, okStatus: number) => {
    while (!stopping) {
      const transfer: Transfer = { started: Date.now() }
      into.push(transfer)
      const { retryAfter, status } = await f()
      transfer.ended = Date.now()
      transfer.status = status === okStatus ? 200 : status
      if (status === 429) await backoff(retryAfter)
    }
  }

  // ---- samples --------------------------------------------------------------------------------

  const samples: Array<{ at: number; runs: number; tools: number; streams: number }> = []
  const loop = monitorEventLoopDelay({ resolution: 10 })
  const schedules: Array<string> = []

  const setUp = async () => {
    const toolsUrl = await listen(tools)
    const hooksUrl = await listen(hooks)
    const connection = await setup("POST", "/connections", {
      name: "Orders",
      type: "customer_https",
      owner: { type: "tenant" },
      base_url: toolsUrl,
      authentication: { type: "service_signed_request" },
      operations: [{
        name: "get_order",
        effect: "read",
        path: "/orders/get",
        input_schema: { type: "object", properties: { order_id: { type: "string" } }, required: ["order_id"] },
        output_schema: { type: "object", properties: { order_id: { type: "string" }, status: { type: "string" } }, required: ["status"] }
      }]
    })
    const reviewed = new Promise<void>((resolve) => (onReviewed = resolve))
    send({ type: "review", connectionId: connection.data.id })
    await reviewed
    const toolIds = ((await setup("GET", `/tools?connection_id=${connection.data.id}`)).items as Array<{ id: string }>).map((t) => t.id)
    workspaceId = (await setup("POST", "/workspaces", { name: "a" })).data.id
    const agentId = (await setup("POST", "/agents", { workspace_id: workspaceId, name: "a" })).data.id
    const revision = async (steps: ReadonlyArray<unknown>, tool_ids: ReadonlyArray<string>) => {
      const profile = await setup("POST", "/model-profiles", { name: "s", provider: "scripted", model: "s", settings: { steps } })
      return (await setup("POST", `/agents/${agentId}/revisions`, { model_profile_id: profile.data.id, instructions: "", tool_ids }))
        .data.id as string
    }
    toolRevision = await revision([
      ...Array.from({ length: config.toolCalls }, () => ({ type: "tool_call", tool: "get_order", input: { order_id: "o-1" } })),
      { type: "text", text: "done" }
    ], toolIds)
    textRevision = await revision([{ type: "text", text: "scheduled" }], [])
    for (let i = 0; i < config.endpoints; i++) {
      await setup("POST", "/webhook-endpoints", { url: `${hooksUrl}/hooks/${i}`, event_types: ["run.succeeded", "run.failed"] })
    }
    // one of each on the idle service
    const run = await oneRun(keys[0]!, 1)
    if (!run.ok) throw new Error("A's run on the idle service did not succeed")
    const up = Date.now()
    const uploaded = await upload("setup")
    if (uploaded.status !== 201 || uploaded.id === undefined) throw new Error(`A's upload on the idle service: ${uploaded.status}`)
    fileId = uploaded.id
    const uploadMs = Date.now() - up
    const down = Date.now()
    if ((await download("setup")).status !== 200) throw new Error("A's download on the idle service failed")
    send({ type: "ready", idle: { runMs: run.ms, uploadMs, downloadMs: Date.now() - down } })
  }
  let onReviewed = () => {}

  const work: Array<Promise<unknown>> = []
  const timers: Array<NodeJS.Timeout> = []

  const go = async () => {
    goAt = Date.now()
    issuedAtGo = issued
    loop.enable()
    timers.push(setInterval(pace, 10))
    timers.push(setInterval(() => samples.push({ at: Date.now(), runs: inFlight, tools: toolInFlight, streams: streamsOpen }), 250))
    let last = { at: goAt, n: sent.length, ended: 0 }
    timers.push(setInterval(() => {
      const now = Date.now()
      const recent = sent.slice(last.n)
      const per = (n: number) => (n / ((now - last.at) / 1000)).toFixed(1)
      console.log(
        `  [A] runs in flight ${inFlight}, tool calls ${toolInFlight}, streams ${streamsOpen}; last ${
          ((now - last.at) / 1000).toFixed(0)
        } s: requests ${per(recent.length)}/s, answered ${per(recent.filter((s) => s.status < 300 && s.status > 0).length)}/s, ` +
          `429 ${per(recent.filter((s) => s.status === 429).length)}/s, runs ended ${per(runsEnded.length - last.ended)}/s`
      )
      last = { at: now, n: sent.length, ended: runsEnded.length }
    }, 5000))
    for (let i = 0; i < config.slots; i++) work.push(slot(i))
    work.push(transfers(uploads, () => upload(), 201), transfers(downloads, () => download(), 200))
    for (let i = 0; i < config.schedules; i++) {
      const schedule = await must("setup", "POST", "/schedules", keys[0]!, {
        workspace_id: workspaceId,
        agent_revision_id: textRevision,
        cron: "* * * * * *",
        timezone: "UTC",
        input: [{ type: "text", text: "tick" }]
      })
      schedules.push(schedule.data.id)
    }
  }

  /** The scheduled runs of the window: each schedule's runs, newest first, read until older than `from`. */
  const fired = async (from: number, to: number) => {
    let count = 0
    for (const id of schedules) {
      let cursor: string | undefined
      for (let page = 0; page < 50; page++) {
        const body = await setup("GET", `/schedules/${id}/runs?limit=100${cursor === undefined ? "" : `&cursor=${cursor}`}`)
        const times = (body.items as Array<{ scheduled_at: string }>).map((r) => Date.parse(r.scheduled_at))
        count += times.filter((t) => t >= from && t < to).length
        cursor = body.next_cursor ?? undefined
        if (cursor === undefined || times.some((t) => t < from)) break
      }
    }
    return count
  }

  const report = async (from: number, to: number): Promise<FloodFigures> => {
    const seconds = (to - from) / 1000
    const within = <A extends { readonly at: number }>(xs: ReadonlyArray<A>) => xs.filter((x) => x.at >= from && x.at < to)
    const requests = within(sent)
    const count = (xs: ReadonlyArray<Sent>, f: (s: Sent) => boolean) => xs.filter(f).length
    const byCode = (xs: ReadonlyArray<Sent>) => {
      const out: Record<string, number> = {}
      for (const s of xs) out[s.code ?? s.status] = (out[s.code ?? s.status] ?? 0) + 1 / seconds
      return out
    }
    const ok = (s: Sent) => s.status >= 200 && s.status < 300
    const gets = requests.filter((s) => s.kind === "get")
    const ended = within(runsEnded)
    const sampled = samples.filter((s) => s.at >= from && s.at < to)
    const transfer = (xs: ReadonlyArray<Transfer>): Transfers => {
      const ended = xs.filter((t) => t.ended !== undefined && t.ended >= from && t.ended < to)
      return {
        completed: summarize(ended.filter((t) => t.status === 200).map((t) => t.ended! - t.started)),
        refused: ended.filter((t) => t.status === 429).length,
        failed: ended.filter((t) => t.status !== 200 && t.status !== 429).length,
        inProgressMs: xs.filter((t) => t.started < to && (t.ended === undefined || t.ended >= to)).map((t) => to - t.started)
      }
    }
    return {
      seconds,
      requests: {
        sent: requests.length / seconds,
        answered: count(requests, ok) / seconds,
        refused: byCode(requests.filter((s) => s.status === 429)),
        other: byCode(requests.filter((s) => !ok(s) && s.status !== 429))
      },
      gets: {
        sent: gets.length / seconds,
        answered: count(gets, ok) / seconds,
        refused: count(gets, (s) => s.status === 429) / seconds,
        latency: summarize(gets.filter(ok).map((s) => s.ms))
      },
      runs: {
        completed: ended.filter((r) => r.ok).length / seconds,
        failed: ended.filter((r) => !r.ok).length,
        inFlight: summarize(sampled.map((s) => s.runs)),
        duration: summarize(ended.map((r) => r.ms))
      },
      toolCalls: {
        answered: toolAnswered.filter((t) => t >= from && t < to).length / seconds,
        inFlight: summarize(sampled.map((s) => s.tools))
      },
      streams: {
        open: summarize(sampled.map((s) => s.streams)),
        refused: count(requests, (s) => s.kind === "stream" && s.status !== 200),
        lag: summarize(within(lags).map((l) => l.ms))
      },
      uploads: transfer(uploads),
      downloads: transfer(downloads),
      webhooks: { received: hooksReceived.filter((t) => t >= from && t < to).length, heldAtEnd: held.size },
      schedules: { fired: await fired(from, to), expected: config.schedules * seconds },
      loopDelay: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6 }
    }
  }

  const stop = async () => {
    stopping = true
    for (const t of timers) clearInterval(t)
    for (const close of closers) close()
    for (const res of held) res.destroy()
    tools.closeAllConnections()
    hooks.closeAllConnections()
    agent.destroy()
    await Promise.race([Promise.allSettled(work), sleep(5000)])
  }

  return { setUp, reviewed: () => onReviewed(), go, report, stop }
}

// ---- the child process --------------------------------------------------------------------------

if (process.argv.includes("--flood") && process.send !== undefined) {
  const send = (message: FromFlood) => process.send!(message)
  let running: ReturnType<typeof flood> | undefined
  const fail = (e: unknown) => {
    send({ type: "failed", message: e instanceof Error ? e.stack ?? e.message : String(e) })
    setTimeout(() => process.exit(1), 100)
  }
  process.on("message", (message: ToFlood) => {
    switch (message.type) {
      case "config":
        running = flood(message.config, send)
        running.setUp().catch(fail)
        break
      case "reviewed":
        running?.reviewed()
        break
      case "go":
        running?.go().catch(fail)
        break
      case "report":
        running?.report(message.from, message.to).then((figures) => send({ type: "report", figures }), fail)
        break
      case "stop":
        void (running?.stop() ?? Promise.resolve()).finally(() => process.exit(0))
        break
    }
  })
  // the bench gone: so is its flood
  process.on("disconnect", () => process.exit(0))
}
