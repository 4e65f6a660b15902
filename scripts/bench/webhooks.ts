/**
 * Webhook fairness across environments (D20, issue 35), out of process: the service is a child
 * process (scripts/bench/child.ts), the receivers are node:http servers in this process. Not a
 * test: it prints figures.
 *
 *   npm run bench:webhooks
 *   BENCH_SERVICE_DIR=/tmp/wh-before npm run bench:webhooks   # another checkout of the service
 *
 * Environment A has 16 endpoints that never answer (each request is held open; the service gives
 * up after 15 s and retries) and a burst of 200 events (runs ending: 3,200 deliveries). Environment
 * B has one endpoint that answers 200 at once and an event every 500 ms from the start of A's burst
 * (40 events). Printed: B's first-attempt delay (the receiver's arrival time minus the event's
 * `created_at`) p50 and p99, how many arrived within 5 s (D20's bound), and how many had not
 * arrived WINDOW seconds after B's last event. The service runs with its default webhook settings.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

import { ALL_SCOPES } from "../../src/Kernel/Scopes.js"
import { json, ms, quantile, type Service, startService } from "./child.js"

const ENDPOINTS_A = 16
const BURST_A = 200
const EVENTS_B = 40
const EVERY_B_MS = 500
const WINDOW_S = 30

const SCOPES = ALL_SCOPES.filter((scope) => /^(agents|conversations|runs|webhooks):/.test(scope))

/** A receiver: `hang` holds every request open; otherwise 200 at once, each body's arrival noted. */
const receiver = async (hang: boolean) => {
  const held = new Set<ServerResponse>()
  const arrived = new Map<string, number>()
  let requests = 0
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      requests++
      if (hang) {
        held.add(res)
        res.on("close", () => held.delete(res))
        return
      }
      const at = Date.now()
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { data: { id: string } }
      if (!arrived.has(body.data.id)) arrived.set(body.data.id, at)
      res.writeHead(200).end("ok")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    arrived,
    requests: () => requests,
    held: () => held.size,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** A sandbox with a scripted agent: a function starting a run in a new conversation (its run id). */
const environment = async (service: Service, name: string) => {
  const { key, P } = await service.sandbox(name, SCOPES)
  const post = async (path: string, body: unknown) => (await json(service.base, "POST", `${P}${path}`, key, body)).data
  const ws = await post("/workspaces", { name: "w" })
  const agent = await post("/agents", { workspace_id: ws.id, name: "a" })
  const mp = await post("/model-profiles", {
    name: "s",
    provider: "scripted",
    model: "s",
    settings: { steps: [{ type: "text", text: "ok {{input}}" }] }
  })
  const rev = await post(`/agents/${agent.id}/revisions`, { model_profile_id: mp.id, instructions: "", tool_ids: [] })
  const conversation = () => post("/conversations", { workspace_id: ws.id, agent_revision_id: rev.id })
  const run = async (c: { id: string }) => (await post(`/conversations/${c.id}/runs`, { input: [{ type: "text", text: "hi" }] })).id
  const endpoint = (url: string) => post("/webhook-endpoints", { url, event_types: ["run.succeeded"] })
  const events = async (runId: string) =>
    (await json(service.base, "GET", `${P}/runs/${runId}/events`, key)).items as Array<{ id: string; type: string; created_at: string }>
  return { conversation, run, endpoint, events }
}

const sleep = (n: number) => new Promise((r) => setTimeout(r, n))

const main = async () => {
  const hanging = await receiver(true)
  const fast = await receiver(false)
  const service = await startService({
    DESTINATION_ALLOWLIST: "127.0.0.1",
    CELL_RATE_LIMIT_RPS: "100000",
    CELL_RATE_LIMIT_BURST: "100000"
  })
  try {
    const a = await environment(service, "Bench Webhooks A")
    const b = await environment(service, "Bench Webhooks B")
    for (let i = 0; i < ENDPOINTS_A; i++) await a.endpoint(`${hanging.url}?endpoint=${i}`)
    await b.endpoint(fast.url)
    const conversationsA = await Promise.all(Array.from({ length: BURST_A }, () => a.conversation()))
    const conversationsB = await Promise.all(Array.from({ length: EVENTS_B }, () => b.conversation()))

    // A's burst (16 runs at a time) and B's steady events, at once
    const started = Date.now()
    const burst = (async () => {
      const queue = [...conversationsA]
      await Promise.all(Array.from({ length: 16 }, async () => {
        for (let c = queue.shift(); c !== undefined; c = queue.shift()) await a.run(c)
      }))
      return Date.now() - started
    })()
    const runsB: Array<string> = []
    for (const c of conversationsB) {
      runsB.push(await b.run(c))
      await sleep(EVERY_B_MS)
    }
    const burstMs = await burst
    const lastB = Date.now()
    while (fast.arrived.size < EVENTS_B && Date.now() - lastB < WINDOW_S * 1000) await sleep(100)

    // each B event's time, from its run's events (the delivery's body carries the same)
    const created = new Map<string, number>()
    for (const runId of runsB) {
      for (let tries = 0; tries < 50; tries++) {
        const event = (await b.events(runId)).find((e) => e.type === "run.succeeded")
        if (event !== undefined) {
          created.set(event.id, Date.parse(event.created_at))
          break
        }
        await sleep(100)
      }
    }
    const delays = [...created].flatMap(([id, at]) => {
      const arrived = fast.arrived.get(id)
      return arrived === undefined ? [] : [arrived - at]
    })
    const missing = created.size - delays.length
    console.log(
      `webhooks (D20): A ${ENDPOINTS_A} endpoints that never answer, ${BURST_A} events (${ENDPOINTS_A * BURST_A} deliveries, posted in ${
        (burstMs / 1000).toFixed(1)
      } s); ` +
        `B 1 endpoint answering at once, ${EVENTS_B} events every ${EVERY_B_MS} ms`
    )
    console.log(
      `  B's first attempt after its event: p50 ${ms(quantile(delays, 0.5))}, p99 ${ms(quantile(delays, 0.99))}, ` +
        `max ${ms(delays.length ? Math.max(...delays) : NaN)}; ${delays.filter((d) => d <= 5000).length} of ${created.size} within 5 s; ` +
        `${missing} not within ${WINDOW_S} s of B's last event`
    )
    console.log(`  A's requests received ${hanging.requests()}, held open at the end ${hanging.held()}`)
  } finally {
    await service.stop()
    await hanging.close()
    await fast.close()
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
