/**
 * The destination guard (D10, issue 5): the vector table at registration (through the real
 * `POST /connections`, 400 `destination_refused`), the address check the dispatcher applies to the
 * socket, and the dispatcher itself against real servers on 127.0.0.1: DNS rebinding, plain http,
 * literals, redirects, and the allowlist as the only way in.
 *
 * Names resolve through `Resolver`, here a table standing in for DNS (this machine has no public
 * DNS); everything else is the production path.
 * (A little over 400 lines: most of it is the vector table, which reads best in one place.)
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { request as undiciRequest } from "undici"
import { defaultToolConfig } from "../src/Config/AppConfig.js"
import {
  checkAddress,
  checkUrl,
  EMPTY_ALLOWLIST,
  guardedDispatcher,
  type Lookup,
  parseAllowlist,
  resolveAndCheck,
  Resolver
} from "../src/Outbound/Guard.js"
import { makeTestApp } from "./support/App.js"
import { createKey, operator, provisionSandbox, request } from "./support/Client.js"
import { CONNECTION_SCOPES, RUN_SCOPES } from "./support/Sandboxes.js"
import { connectionBody } from "./support/ToolHost.js"
import { TOOL_ISSUER } from "./support/ToolSandbox.js"
import { eventually } from "./support/Waiting.js"

/** Refused at registration without any DNS: scheme, form, name or literal address. */
const REFUSED_URLS: ReadonlyArray<string> = [
  // schemes and URL forms
  "http://api.example.com",
  "ftp://api.example.com",
  "file:///etc/passwd",
  "gopher://api.example.com:70/",
  "ws://api.example.com",
  "https://user:pw@api.example.com",
  "https://user@api.example.com",
  "not a url",
  "https://",
  // local and internal names
  "https://localhost",
  "https://LOCALHOST:8443",
  "https://localhost.",
  "https://api.localhost",
  "https://printer.local",
  "https://db.internal",
  "https://metadata",
  "https://metadata.google.internal",
  "https://metadata.google.internal.",
  "https://instance-data",
  "https://box.localdomain",
  "https://router.home.arpa",
  "https://intranet",
  // IPv4 loopback, unspecified, private, link-local, CGNAT, reserved, multicast
  "https://127.0.0.1",
  "https://127.255.255.254",
  "https://0.0.0.0",
  "https://0.1.2.3",
  "https://10.0.0.8",
  "https://10.255.255.255",
  "https://172.16.0.1",
  "https://172.31.255.254",
  "https://192.168.1.1",
  "https://169.254.0.1",
  "https://100.64.0.1",
  "https://100.127.255.254",
  "https://192.0.0.170",
  "https://192.0.2.1",
  "https://198.18.0.1",
  "https://198.51.100.7",
  "https://203.0.113.9",
  "https://224.0.0.1",
  "https://239.255.255.250",
  "https://240.0.0.1",
  "https://255.255.255.255",
  // cloud metadata addresses
  "https://169.254.169.254",
  "https://169.254.169.254/latest/meta-data",
  "https://100.100.100.200",
  "https://168.63.129.16",
  "https://[fd00:ec2::254]",
  // decimal, octal, hex and shortened IPv4 spellings
  "https://2130706433",
  "https://0x7f000001",
  "https://017700000001",
  "https://0177.0.0.1",
  "https://0x7f.0.0.1",
  "https://127.1",
  "https://127.0.1",
  "https://127.0.0.01",
  "https://0",
  "https://3232235777",
  "https://0xa9fea9fe",
  "https://%31%32%37.0.0.1",
  // IPv6: unspecified, loopback, unique-local, link-local, site-local, multicast, documentation
  "https://[::]",
  "https://[::1]",
  "https://[0:0:0:0:0:0:0:1]",
  "https://[fc00::1]",
  "https://[fd12:3456:789a::1]",
  "https://[fe80::1]",
  "https://[fec0::1]",
  "https://[ff02::1]",
  "https://[2001:db8::1]",
  "https://[100::1]",
  // IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo
  "https://[::ffff:127.0.0.1]",
  "https://[::ffff:7f00:1]",
  "https://[::ffff:10.0.0.1]",
  "https://[::ffff:169.254.169.254]",
  "https://[0:0:0:0:0:ffff:a9fe:a9fe]",
  "https://[::ffff:8.8.8.8]",
  "https://[::127.0.0.1]",
  "https://[::7f00:1]",
  "https://[::a9fe:a9fe]",
  "https://[64:ff9b::7f00:1]",
  "https://[64:ff9b::a9fe:a9fe]",
  "https://[2002:7f00:1::]",
  "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
  "https://[4000::1]"
]

/** Names and what the stand-in DNS answers for them. */
const DNS: Record<string, ReadonlyArray<string>> = {
  "api.example.com": ["93.184.216.34"],
  "v6.example.com": ["2606:4700:4700::1111"],
  "private.example.com": ["10.0.0.5"],
  "loopback.example.com": ["127.0.0.1"],
  "metadata.example.com": ["169.254.169.254"],
  "ula.example.com": ["fd12::1"],
  "mapped.example.com": ["::ffff:127.0.0.1"],
  "mixed.example.com": ["93.184.216.34", "127.0.0.1"],
  "cgnat.example.com": ["100.64.1.1"]
}

const tableLookup = (table: Record<string, ReadonlyArray<string>>): Lookup => async (hostname) => {
  const addresses = table[hostname]
  if (addresses === undefined) throw Object.assign(new Error(`queryA ENOTFOUND ${hostname}`), { code: "ENOTFOUND" })
  return addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }))
}

/** A name that resolves to a public address the first time and to 127.0.0.1 after (DNS rebinding). */
const rebindingLookup = () => {
  const state = { answers: 0 }
  const lookup: Lookup = async (hostname) => {
    if (hostname !== "rebind.example.com") throw Object.assign(new Error(`queryA ENOTFOUND ${hostname}`), { code: "ENOTFOUND" })
    return ++state.answers === 1 ? [{ address: "93.184.216.34", family: 4 }] : [{ address: "127.0.0.1", family: 4 }]
  }
  return { lookup, state }
}

/** Refused at registration because of what the name resolves to. */
const REFUSED_BY_DNS = [
  "https://private.example.com",
  "https://loopback.example.com",
  "https://metadata.example.com",
  "https://ula.example.com",
  "https://mapped.example.com",
  "https://mixed.example.com",
  "https://cgnat.example.com",
  "https://nxdomain.example.com"
]

/** Admitted: public names and literals (positive controls). */
const ALLOWED_URLS = [
  "https://api.example.com",
  "https://api.example.com:8443/tools",
  "https://API.Example.COM./v1",
  "https://v6.example.com",
  "https://93.184.216.34",
  "https://8.8.8.8/path",
  "https://1.1.1.1.",
  "https://[2606:4700:4700::1111]"
]

describe("registration vectors (pure check)", () => {
  it("has at least 60 refused vectors", () => {
    expect(REFUSED_URLS.length + REFUSED_BY_DNS.length).toBeGreaterThanOrEqual(60)
  })

  it.each(REFUSED_URLS)("refuses %s", (url) => {
    const checked = checkUrl(url)
    expect(checked.ok, JSON.stringify(checked)).toBe(false)
  })

  it.each(REFUSED_BY_DNS)("refuses %s by its addresses", async (url) => {
    const checked = checkUrl(url)
    expect(checked.ok).toBe(true)
    const host = new URL(url).hostname
    const reason = await resolveAndCheck(host, EMPTY_ALLOWLIST, tableLookup(DNS))
    expect(reason).toBeTypeOf("string")
    // the class of the address, never the address internal DNS answered (D20)
    for (const address of DNS[host] ?? []) expect(reason).not.toContain(address)
  })

  it.each(ALLOWED_URLS)("admits %s", async (url) => {
    const checked = checkUrl(url)
    expect(checked.ok, JSON.stringify(checked)).toBe(true)
    expect(await resolveAndCheck(new URL(url).hostname, EMPTY_ALLOWLIST, tableLookup(DNS))).toBeUndefined()
  })

  it("the allowlist admits named hosts and CIDRs, and http:// only for them", () => {
    const allowlist = parseAllowlist("127.0.0.1/32, tools.dev.test, ::1")
    expect(checkUrl("http://127.0.0.1:8080", allowlist).ok).toBe(true)
    expect(checkUrl("http://tools.dev.test:8080", allowlist).ok).toBe(true)
    expect(checkUrl("https://[::1]:8443", allowlist).ok).toBe(true)
    expect(checkUrl("http://127.0.0.2:8080", allowlist).ok).toBe(false)
    expect(checkUrl("http://api.example.com", allowlist).ok).toBe(false)
    expect(checkUrl("https://10.0.0.1", allowlist).ok).toBe(false)
    expect(() => parseAllowlist("10.0.0.0/99")).toThrow(/not a valid CIDR/)
    expect(() => parseAllowlist("bad host!")).toThrow(/neither a host name nor a CIDR/)
  })
})

describe("connect-time address check (the socket's remote address)", () => {
  const REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "::ffff:127.0.0.1",
    "::127.0.0.1",
    "0.0.0.0",
    "::",
    "10.1.2.3",
    "172.20.0.1",
    "192.168.0.10",
    "169.254.169.254",
    "169.254.10.10",
    "100.64.0.1",
    "fd00:ec2::254",
    "fd00::1",
    "fe80::1",
    "fe80::1%eth0",
    "ff02::1",
    "64:ff9b::a00:1",
    "224.0.0.251",
    "255.255.255.255",
    "100.100.100.200",
    "168.63.129.16"
  ]
  it.each(REFUSED)("refuses %s", (address) => {
    expect(checkAddress(address)).toBeTypeOf("string")
  })
  it.each(["93.184.216.34", "8.8.4.4", "2606:4700:4700::1111", "::ffff:93.184.216.34"])("admits %s", (address) => {
    expect(checkAddress(address)).toBeUndefined()
  })
  it("an allowlisted CIDR admits its addresses, also IPv4-mapped", () => {
    const allowlist = parseAllowlist("127.0.0.0/8")
    expect(checkAddress("127.0.0.1", allowlist)).toBeUndefined()
    expect(checkAddress("::ffff:127.0.0.1", allowlist)).toBeUndefined()
    expect(checkAddress("10.0.0.1", allowlist)).toBeTypeOf("string")
  })
})

/** A real HTTP server on 127.0.0.1 counting the connections it accepted. */
const localServer = (handler: Parameters<typeof createServer>[1]) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const server: Server = createServer(handler)
      const stats = { connections: 0 }
      server.on("connection", () => stats.connections++)
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      return { server, stats, port: (server.address() as AddressInfo).port }
    }),
    ({ server }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
      )
  )

const attempt = (url: string, dispatcher: ReturnType<typeof guardedDispatcher>) =>
  Effect.promise(() =>
    undiciRequest(url, { method: "GET", dispatcher }).then(
      async (res) => ({ ok: true as const, status: res.statusCode, location: res.headers.location, body: await res.body.text() }),
      (e: any) => ({ ok: false as const, code: String(e?.code ?? e?.cause?.code ?? ""), message: String(e?.message ?? e) })
    )
  )

describe("guarded dispatcher against real servers", () => {
  it.scopedLive("DNS rebinding: public at registration, 127.0.0.1 at connect -> refused before any connection", () =>
    Effect.gen(function*() {
      const { port, stats } = yield* localServer((_req, res) => res.end("secret"))
      const { lookup: rebinding, state } = rebindingLookup()
      expect(checkUrl(`https://rebind.example.com:${port}`).ok).toBe(true)
      expect(yield* Effect.promise(() => resolveAndCheck("rebind.example.com", EMPTY_ALLOWLIST, rebinding))).toBeUndefined()
      const dispatcher = guardedDispatcher(EMPTY_ALLOWLIST, { lookup: rebinding })
      const result = yield* attempt(`https://rebind.example.com:${port}/`, dispatcher)
      expect(result.ok).toBe(false)
      if (!result.ok) {
        expect(result.code).toBe("DESTINATION_REFUSED")
        expect(result.message).toContain("rebind.example.com resolves to a non-public address (loopback)")
        expect(result.message).not.toContain("127.0.0.1")
      }
      expect(state.answers).toBe(2)
      expect(stats.connections).toBe(0)
      yield* Effect.promise(() => dispatcher.close())
    }))

  it.scopedLive("plain http, and literals of local addresses, are refused unless allowlisted; the allowlist gets through", () =>
    Effect.gen(function*() {
      const { port, stats } = yield* localServer((_req, res) => res.end("hello"))
      const toLocal: Lookup = async () => [{ address: "127.0.0.1", family: 4 }]
      const closed = guardedDispatcher(EMPTY_ALLOWLIST, { lookup: toLocal })
      for (
        const url of [
          `http://127.0.0.1:${port}/`,
          `https://127.0.0.1:${port}/`,
          `http://tools.dev.test:${port}/`,
          `https://[::ffff:127.0.0.1]:${port}/`
        ]
      ) {
        const result = yield* attempt(url, closed)
        expect(result.ok, url).toBe(false)
        if (!result.ok) expect(result.code, url).toBe("DESTINATION_REFUSED")
      }
      expect(stats.connections).toBe(0)
      yield* Effect.promise(() => closed.close())

      // a name resolving into an allowlisted CIDR: https may connect, plain http still may not
      const cidrOnly = guardedDispatcher(parseAllowlist("127.0.0.1/32"), { lookup: toLocal })
      const plain = yield* attempt(`http://tools.dev.test:${port}/`, cidrOnly)
      expect(plain).toMatchObject({ ok: false, code: "DESTINATION_REFUSED" })
      expect(stats.connections).toBe(0)
      yield* Effect.promise(() => cidrOnly.close())

      // positive controls: the same server is reachable once allowlisted, by CIDR or by name
      const open = guardedDispatcher(parseAllowlist("127.0.0.1/32, tools.dev.test"), { lookup: toLocal })
      for (const url of [`http://127.0.0.1:${port}/`, `http://tools.dev.test:${port}/`]) {
        const result = yield* attempt(url, open)
        expect(result, url).toMatchObject({ ok: true, status: 200, body: "hello" })
      }
      expect(stats.connections).toBe(2)
      yield* Effect.promise(() => open.close())
    }))

  it.scopedLive("a redirect is not followed (even to an allowed server): the 3xx is the answer", () =>
    Effect.gen(function*() {
      const target = yield* localServer((_req, res) => res.end("followed"))
      const origin = yield* localServer((_req, res) => {
        res.writeHead(302, { location: `http://127.0.0.1:${target.port}/` })
        res.end()
      })
      const dispatcher = guardedDispatcher(parseAllowlist("127.0.0.1/32"))
      const result = yield* attempt(`http://127.0.0.1:${origin.port}/`, dispatcher)
      expect(result).toMatchObject({ ok: true, status: 302, location: `http://127.0.0.1:${target.port}/` })
      expect(target.stats.connections).toBe(0)
      yield* Effect.promise(() => dispatcher.close())
    }))
})

const SCOPES = [...RUN_SCOPES, ...CONNECTION_SCOPES]

describe("through the service", () => {
  it.live("POST /connections refuses every vector with 400 destination_refused and admits the controls", () =>
    Effect.gen(function*() {
      const sb = yield* provisionSandbox()
      const key = (yield* createKey(sb.tenantId, SCOPES, "manager")).secret
      const register = (url: string) => request("POST", `${sb.P}/connections`, { key, body: connectionBody(url) })
      for (const url of [...REFUSED_URLS.filter((u) => u.startsWith("http") && u !== "https://"), ...REFUSED_BY_DNS]) {
        const res = yield* register(url)
        expect(res.status, `${url}: ${res.text}`).toBe(400)
        expect(res.body.error, url).toMatchObject({ code: "destination_refused", param: "base_url" })
        for (const address of DNS[new URL(url).hostname] ?? []) expect(res.body.error.message, url).not.toContain(address)
      }
      for (const url of ALLOWED_URLS.filter((u) => !u.endsWith("."))) {
        const res = yield* register(url.replace(/\/(tools|v1|path)$/, ""))
        expect(res.status, `${url}: ${res.text}`).toBe(201)
      }
    }).pipe(
      Effect.scoped,
      Effect.provide(makeTestApp({ tools: { ...defaultToolConfig, issuer: Option.some(TOOL_ISSUER) } })),
      Effect.provideService(Resolver, { lookup: tableLookup(DNS) })
    ), 60_000)

  it.live(
    "a reviewed tool whose name rebinds to 127.0.0.1 is never reached: the agent sees tool_unreachable",
    () =>
      Effect.gen(function*() {
        const { port, stats } = yield* localServer((_req, res) => res.end("{}"))
        const sb = yield* provisionSandbox()
        const key = (yield* createKey(sb.tenantId, SCOPES, "manager")).secret
        const call = (method: string, path: string, body?: unknown) =>
          Effect.map(request(method, `${sb.P}${path}`, { key, ...(body === undefined ? {} : { body }) }), (res) => {
            expect(res.status, res.text).toBeLessThan(300)
            return res.body.data ?? res.body
          })
        const conn = yield* call("POST", "/connections", connectionBody(`https://rebind.example.com:${port}`))
        const reviewed = yield* operator("POST", `/connections/${conn.id}/review`, { decision: "approve" })
        expect(reviewed.status, reviewed.text).toBe(200)
        const tools = (yield* call("GET", `/tools?connection_id=${conn.id}`)).items
        const ws = yield* call("POST", "/workspaces", { name: "W" })
        const mp = yield* call("POST", "/model-profiles", {
          name: "s",
          provider: "scripted",
          model: "scripted-1",
          settings: {
            steps: [{ type: "tool_call", tool: "get_order", input: { order_id: "o-1" } }, { type: "text", text: "Could not look it up." }]
          }
        })
        const agent = yield* call("POST", "/agents", { workspace_id: ws.id, name: "A" })
        const rev = yield* call("POST", `/agents/${agent.id}/revisions`, {
          model_profile_id: mp.id,
          instructions: "x",
          tool_ids: tools.map((t: any) => t.id)
        })
        const conv = yield* call("POST", "/conversations", { workspace_id: ws.id, agent_revision_id: rev.id })
        const run = yield* call("POST", `/conversations/${conv.id}/runs`, { input: [{ type: "text", text: "where is o-1" }] })
        const done = yield* eventually(call("GET", `/runs/${run.id}`), (r) => r.status === "succeeded" || r.status === "failed")
        expect(done.status).toBe("succeeded")
        const events = (yield* call("GET", `/runs/${run.id}/events?limit=100`)).items as Array<any>
        const failed = events.find((e) => e.type === "run.tool_call.failed")
        expect(failed?.data.error).toMatchObject({ type: "tool_unreachable" })
        expect(failed.data.error.message).toContain("a non-public address (loopback)")
        expect(failed.data.error.message).not.toContain("127.0.0.1")
        expect(stats.connections).toBe(0)
      }).pipe(
        Effect.scoped,
        Effect.provide(makeTestApp({ tools: { ...defaultToolConfig, issuer: Option.some(TOOL_ISSUER), requestTimeoutSeconds: 2 } })),
        Effect.provideService(Resolver, { lookup: rebindingLookup().lookup })
      ),
    60_000
  )
})
