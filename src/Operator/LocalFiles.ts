/**
 * What a running service and the operator CLI leave in `DATA_DIR` for the local first run, so a
 * second terminal needs no settings repeated (issue 15):
 *   - `service.json` (mode 0644): the address the service listens on and its pid, written when it
 *     listens and removed when it stops. The CLI and `npm run quickstart` call it unless told
 *     otherwise (`--url`, `OPERATOR_URL`, `AGENT_PLATFORM_URL`).
 *   - `sandbox.json` (mode 0600, like `operator-token`): the sandbox `provision-sandbox` made last
 *     (tenant, first key's secret, quickstart ids), which `npm run quickstart` then uses instead of
 *     provisioning another.
 * Plain synchronous Node: these are read by scripts before anything else runs.
 */
import * as fs from "node:fs"
import * as path from "node:path"

export const dataDirOf = (env: NodeJS.ProcessEnv = process.env) => env["DATA_DIR"] || "./.data"

const serviceFile = (dataDir: string) => path.resolve(dataDir, "service.json")
const sandboxFile = (dataDir: string) => path.resolve(dataDir, "sandbox.json")

/** A URL local clients can call for a listening address (a wildcard bind is reached on loopback). */
export const localUrl = (hostname: string, port: number) => {
  const host = hostname === "0.0.0.0" || hostname === ""
    ? "127.0.0.1"
    : hostname === "::"
    ? "[::1]"
    : hostname.includes(":")
    ? `[${hostname}]`
    : hostname
  return `http://${host}:${port}`
}

export const writeServiceFile = (dataDir: string, url: string) => {
  fs.mkdirSync(dataDir, { recursive: true })
  fs.writeFileSync(serviceFile(dataDir), `${JSON.stringify({ url, pid: process.pid, started_at: new Date().toISOString() }, null, 2)}\n`, {
    mode: 0o644
  })
}

/** Removes `service.json` if it is this process's. */
export const removeServiceFile = (dataDir: string) => {
  if (readJson(serviceFile(dataDir))?.pid === process.pid) fs.rmSync(serviceFile(dataDir), { force: true })
}

const readJson = (file: string): any => {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"))
  } catch {
    return undefined
  }
}

const alive = (pid: unknown) => {
  if (typeof pid !== "number") return false
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** The URL of the service running on this `DATA_DIR`, if one is (its pid alive). */
export const runningServiceUrl = (dataDir: string): string | undefined => {
  const service = readJson(serviceFile(dataDir))
  return service && typeof service.url === "string" && alive(service.pid) ? service.url : undefined
}

/** Where to reach the service: `explicit` (a flag or variable), the running one, else `$PORT` (8080). */
export const serviceUrl = (explicit: string | undefined, env: NodeJS.ProcessEnv = process.env) =>
  explicit || runningServiceUrl(dataDirOf(env)) || `http://127.0.0.1:${env["PORT"] || 8080}`

export interface ProvisionedSandbox {
  readonly url: string
  readonly tenant_id: string
  readonly api_key: string
  readonly workspace_id: string
  readonly agent_revision_id: string
}

export const writeSandboxFile = (dataDir: string, sandbox: ProvisionedSandbox) => {
  fs.mkdirSync(dataDir, { recursive: true })
  fs.rmSync(sandboxFile(dataDir), { force: true })
  fs.writeFileSync(sandboxFile(dataDir), `${JSON.stringify(sandbox, null, 2)}\n`, { mode: 0o600 })
}

/** The sandbox `provision-sandbox` made last on this `DATA_DIR` for the service at `url`, if any. */
export const readSandboxFile = (dataDir: string, url: string): ProvisionedSandbox | undefined => {
  const sandbox = readJson(sandboxFile(dataDir))
  return sandbox && sandbox.url === url && typeof sandbox.api_key === "string" ? sandbox : undefined
}
