/**
 * The destination guard for customer tools (D10): which URLs and addresses the service may call.
 *
 * - URLs: `https://` only (plain `http://` only for allowlisted hosts), no userinfo, a host that is
 *   a DNS name, a dotted-quad IPv4 or a bracketed IPv6 — never the decimal, octal, hex or shortened
 *   IPv4 spellings (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`) a resolver would accept.
 * - Names: `localhost` and `*.localhost`, `*.local`, `*.internal`, `metadata`,
 *   `metadata.google.internal` are refused.
 * - Addresses: only global unicast. ipaddr.js classifies; everything but `unicast` (loopback,
 *   private, link-local, CGNAT, unique-local, multicast, broadcast, reserved, benchmarking, 6to4 /
 *   Teredo / NAT64, unspecified) is refused, IPv6 outside 2000::/3 (the only global unicast block:
 *   this refuses the deprecated IPv4-compatible `::a.b.c.d` forms) is refused, and the cloud
 *   metadata addresses are refused by name. An IPv4-mapped literal (`::ffff:a.b.c.d`) is refused at
 *   registration (write the IPv4 address); a socket reporting one is judged as its IPv4 address.
 * - Connect time: the undici dispatcher refuses plain `http://` to a host not allowlisted, checks
 *   every address DNS gives it before connecting, and the address the socket actually connected
 *   to, so a name that rebinds to a private address between registration and call is refused.
 *
 * `DESTINATION_ALLOWLIST` (operator config, empty by default) lists host names or CIDRs admitted
 * anyway (and over `http://`), for development and tests only.
 */
import type { LookupAddress } from "node:dns"
import { promises as dns } from "node:dns"
import type { Socket } from "node:net"

import { Context } from "effect"
import ipaddr from "ipaddr.js"
import { Agent, buildConnector } from "undici"

export interface Allowlist {
  readonly hosts: ReadonlySet<string>
  readonly cidrs: ReadonlyArray<[ipaddr.IPv4 | ipaddr.IPv6, number]>
}

export const EMPTY_ALLOWLIST: Allowlist = { hosts: new Set(), cidrs: [] }

export const normalizeHost = (host: string) => host.toLowerCase().replace(/\.$/, "").replace(/^\[|\]$/g, "")

/** Parses `DESTINATION_ALLOWLIST`: comma-separated host names or CIDRs; a bad entry throws naming it. */
export const parseAllowlist = (raw: string): Allowlist => {
  const hosts = new Set<string>()
  const cidrs: Array<[ipaddr.IPv4 | ipaddr.IPv6, number]> = []
  for (const entry of raw.split(",").map((e) => e.trim()).filter((e) => e.length > 0)) {
    if (entry.includes("/")) {
      try {
        cidrs.push(ipaddr.parseCIDR(entry))
      } catch {
        throw new Error(`"${entry}" is not a valid CIDR`)
      }
    } else if (ipaddr.isValid(normalizeHost(entry))) {
      const ip = ipaddr.parse(normalizeHost(entry))
      cidrs.push([ip, ip.kind() === "ipv4" ? 32 : 128])
    } else if (/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/i.test(entry)) {
      hosts.add(normalizeHost(entry))
    } else {
      throw new Error(`"${entry}" is neither a host name nor a CIDR`)
    }
  }
  return { hosts, cidrs }
}

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR("2000::/3") as [ipaddr.IPv6, number]

const METADATA_ADDRESSES = new Set(["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"])
const REFUSED_NAMES = new Set(["localhost", "metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"])
const REFUSED_SUFFIXES = [".localhost", ".local", ".internal", ".localdomain", ".home.arpa"]

const inAllowedCidr = (ip: ipaddr.IPv4 | ipaddr.IPv6, allowlist: Allowlist) =>
  allowlist.cidrs.some(([range, bits]) => {
    const candidate = ip.kind() === range.kind()
      ? ip
      : ip.kind() === "ipv6" && (ip as ipaddr.IPv6).isIPv4MappedAddress()
      ? (ip as ipaddr.IPv6).toIPv4Address()
      : undefined
    return candidate !== undefined && candidate.kind() === range.kind() && candidate.match(range as any, bits)
  })

/**
 * The class of address the service may not connect to (`a loopback address`, `a cloud metadata
 * address`, ...), or undefined when it may. It never names the address: a reason that reaches a
 * customer about a name they registered must not reveal what internal DNS answers (D20).
 */
export const refusedClass = (address: string, allowlist: Allowlist = EMPTY_ALLOWLIST): string | undefined => {
  const bare = normalizeHost(address).replace(/%.*$/, "")
  if (!ipaddr.isValid(bare)) return "not an IP address"
  let ip = ipaddr.parse(bare)
  if (inAllowedCidr(ip, allowlist)) return undefined
  if (ip.kind() === "ipv6" && (ip as ipaddr.IPv6).isIPv4MappedAddress()) ip = (ip as ipaddr.IPv6).toIPv4Address()
  if (METADATA_ADDRESSES.has(ip.toString())) return "a cloud metadata address"
  const range = ip.range()
  if (range !== "unicast") return `a non-public address (${range})`
  if (ip.kind() === "ipv6" && !(ip as ipaddr.IPv6).match(GLOBAL_UNICAST_V6)) return "a non-public address (outside 2000::/3)"
  return undefined
}

/** Why the service may not connect to `address` as written by the customer (a literal), or undefined when it may. */
export const checkAddress = (address: string, allowlist: Allowlist = EMPTY_ALLOWLIST): string | undefined => {
  const refused = refusedClass(address, allowlist)
  return refused === undefined ? undefined : `${address} is ${refused}`
}

export type UrlCheck = { readonly ok: true; readonly url: URL } | { readonly ok: false; readonly reason: string }

const IPV4_DOTTED = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/

/**
 * The registration check of a destination URL (no DNS): scheme, userinfo, host form, names and
 * literal addresses.
 */
export const checkUrl = (raw: string, allowlist: Allowlist = EMPTY_ALLOWLIST): UrlCheck => {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { ok: false, reason: "not a valid absolute URL" }
  }
  if (url.username !== "" || url.password !== "") return { ok: false, reason: "URLs with user information are not allowed" }
  // The host as written (WHATWG URL normalizes numeric IPv4 forms, which hides them).
  const written = /^[a-z][a-z0-9+.-]*:\/\/(?:[^@/?#]*@)?(\[[^\]]*\]|[^:/?#]*)/i.exec(raw.trim())?.[1] ?? ""
  const host = normalizeHost(url.hostname)
  if (host === "") return { ok: false, reason: "the URL has no host" }
  const writtenHost = normalizeHost(written)
  if (!writtenHost.includes(":") && /^[0-9a-fx.]+$/i.test(writtenHost) && !IPV4_DOTTED.test(writtenHost) && /^[0-9]/.test(writtenHost)) {
    return { ok: false, reason: `"${written}" is not a dotted-quad IPv4 address (numeric, octal or hex forms are refused)` }
  }
  const literal = ipaddr.isValid(host)
  const allowed = allowlist.hosts.has(host) || (literal && inAllowedCidr(ipaddr.parse(host), allowlist))
  if (url.protocol !== "https:" && !(allowed && url.protocol === "http:")) {
    return { ok: false, reason: "only https:// destinations are allowed" }
  }
  if (allowed) return { ok: true, url }
  if (literal) {
    const ip = ipaddr.parse(host)
    if (ip.kind() === "ipv6" && (ip as ipaddr.IPv6).isIPv4MappedAddress()) {
      return { ok: false, reason: `${host} is an IPv4-mapped IPv6 address; write the IPv4 address` }
    }
    const reason = checkAddress(host, allowlist)
    return reason === undefined ? { ok: true, url } : { ok: false, reason }
  }
  if (REFUSED_NAMES.has(host) || REFUSED_SUFFIXES.some((s) => host.endsWith(s))) {
    return { ok: false, reason: `${host} is a local or internal name` }
  }
  if (!host.includes(".")) return { ok: false, reason: `${host} is not a fully qualified public name` }
  return { ok: true, url }
}

export type Lookup = (hostname: string) => Promise<ReadonlyArray<{ readonly address: string; readonly family: number }>>

const systemLookup: Lookup = (hostname) => dns.lookup(hostname, { all: true, verbatim: true })

/**
 * How names are resolved, at registration and at connect time: the system resolver. A reference,
 * so a test can stand in a resolver that answers differently the second time (DNS rebinding).
 */
export class Resolver extends Context.Reference<Resolver>()("Resolver", {
  defaultValue: (): { readonly lookup: Lookup } => ({ lookup: systemLookup })
}) {}

/**
 * The registration check of a name's addresses: every address it resolves to must be allowed (a
 * name with one private address among public ones is refused). Undefined when allowed.
 */
export const resolveAndCheck = async (
  hostname: string,
  allowlist: Allowlist = EMPTY_ALLOWLIST,
  lookup: Lookup = systemLookup
): Promise<string | undefined> => {
  const host = normalizeHost(hostname)
  if (allowlist.hosts.has(host) || ipaddr.isValid(host)) return undefined
  let addresses: ReadonlyArray<{ address: string }>
  try {
    addresses = await lookup(host)
  } catch (e: any) {
    return `${host} does not resolve (${e?.code ?? "lookup failed"})`
  }
  if (addresses.length === 0) return `${host} does not resolve`
  for (const { address } of addresses) {
    const refused = refusedClass(address, allowlist)
    if (refused !== undefined) return `${host} resolves to ${refused}`
  }
  return undefined
}

export class DestinationRefused extends Error {
  readonly code = "DESTINATION_REFUSED"
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | Array<LookupAddress>, family?: number) => void

/**
 * An undici dispatcher that connects only to allowed destinations: plain `http://` only to an
 * allowlisted host, every address DNS answers is checked before the socket is opened, and the
 * socket's actual remote address after it connects. It follows no redirects (undici's default
 * without a redirect interceptor).
 */
export const guardedDispatcher = (
  allowlist: Allowlist = EMPTY_ALLOWLIST,
  options: {
    readonly lookup?: Lookup
    readonly connectTimeoutMs?: number
    /** a response body larger than this fails the request (undici's `maxResponseSize`) */
    readonly maxResponseSize?: number
  } = {}
): Agent => {
  const lookup = options.lookup ?? systemLookup
  const guardedLookup = (hostname: string, opts: { all?: boolean }, callback: LookupCallback) => {
    const host = normalizeHost(hostname)
    lookup(host).then(
      (addresses) => {
        if (!allowlist.hosts.has(host)) {
          for (const a of addresses) {
            const refused = refusedClass(a.address, allowlist)
            if (refused !== undefined) return callback(new DestinationRefused(`${host} resolves to ${refused}`), [])
          }
        }
        if (opts?.all) return callback(null, addresses.map((a) => ({ address: a.address, family: a.family })))
        const first = addresses[0]
        return first ? callback(null, first.address, first.family) : callback(new DestinationRefused(`${host} does not resolve`), [])
      },
      (err) => callback(err, [])
    )
  }
  const connect = buildConnector({ lookup: guardedLookup as any, timeout: options.connectTimeoutMs ?? 10_000 } as any)
  return new Agent({
    ...(options.maxResponseSize === undefined ? {} : { maxResponseSize: options.maxResponseSize }),
    connect: (opts, callback) => {
      const host = normalizeHost(opts.hostname)
      const allowedHost = allowlist.hosts.has(host) || (ipaddr.isValid(host) && inAllowedCidr(ipaddr.parse(host), allowlist))
      if (opts.protocol !== "https:" && !allowedHost) {
        return callback(new DestinationRefused(`only https:// destinations are allowed (${host})`), null)
      }
      if (!allowlist.hosts.has(host) && ipaddr.isValid(host)) {
        const reason = checkAddress(host, allowlist)
        if (reason !== undefined) return callback(new DestinationRefused(reason), null)
      }
      connect(opts, (err, socket) => {
        if (err || !socket) return callback(err ?? new Error("no socket"), null)
        const remote = (socket as Socket).remoteAddress
        const refused = remote === undefined
          ? "no remote address"
          : allowlist.hosts.has(host)
          ? undefined
          : refusedClass(remote, allowlist)
        if (refused !== undefined) {
          socket.destroy()
          return callback(new DestinationRefused(`${host} connected to ${refused}`), null)
        }
        callback(null, socket)
      })
    }
  })
}
