/**
 * Published secrets never run (D20): the service refuses to start with an `OPERATOR_TOKEN`,
 * `SECRETS_KEY` or `CLUSTER_SECRET` that appears in the repository, since anyone can read it there.
 *
 * A value is published when
 *   1. its SHA-256 is in `PUBLISHED` below: every example, development or test secret this
 *      repository has ever committed. They stay public in its git history after the files change,
 *      so they are refused by digest, not by looking for them in today's files; or
 *   2. it appears in a text file shipped with the service: under the package root, `README.md`,
 *      `docker-compose.yml`, `Dockerfile`, `package.json` and the files of `docs/`, `scripts/`,
 *      `test/`, `src/` and `dist/` (its `.js`; source maps and declarations repeat `src/`), read
 *      once at start when a secret is configured (about 400 files, 4 MB: tens of milliseconds).
 *      This catches an example secret committed later and not yet listed here.
 * A key (`SECRETS_KEY`) is compared by its 32 bytes: its digest, and its hex, base64 and base64url
 * spellings in the files, so another spelling of a published key is refused too.
 *
 * Adding an example secret to the repository (a doc, a test, a compose file): add its digest here
 * (`node -e 'console.log(require("crypto").createHash("sha256").update(process.argv[1]).digest("hex"))' <value>`;
 * for a key, of its 32 bytes), or better, generate it at run time (`randomBytes`).
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** SHA-256 (hex) of each secret ever committed, of its UTF-8 text (a token) or its bytes (a key), and where it was. */
const PUBLISHED: ReadonlyMap<string, string> = new Map([
  ["e103a97bd4a0c8428c9ac677c71c79691759d1dc937e68f54edf50a046198c5a", "docker-compose.yml's former development OPERATOR_TOKEN"],
  ["5ed19580e2f196f09def5e203b2a6fc236eb6e403bfd15a521c2e9c180050dca", "docker-compose.yml's former development SECRETS_KEY"],
  ["2d21d486acc2014ae5972f3b2547ce70956aa07aa176380a066c55c180dafc15", "a former test OPERATOR_TOKEN (test/support/App.ts)"],
  ["699dc2c43a2eb3864fe6ff669cf3a50d0533ff8f78991b9204d5e29441922db9", "the benchmark's OPERATOR_TOKEN (scripts/bench/inprocess.ts)"],
  ["4bd797381fa51ff81d9e9167c80269e2a6514189fe92232d4f563dff6f071fff", "a former test OPERATOR_TOKEN (test/Startup.NpmStart.test.ts)"]
])

/** A configured secret: its name, the bytes that are the secret, and how they may be written in a file. */
export interface Candidate {
  readonly name: string
  readonly bytes: Uint8Array
  readonly spellings: ReadonlyArray<string>
}

/** A token or a passphrase: the secret is its text. */
export const textCandidate = (name: string, text: string): Candidate => ({
  name,
  bytes: Buffer.from(text, "utf8"),
  spellings: [text]
})

/** A key given as hex or base64: the secret is its bytes, whichever spelling. */
export const keyCandidate = (name: string, text: string, bytes: Buffer): Candidate => ({
  name,
  bytes,
  spellings: [text.trim(), bytes.toString("hex"), bytes.toString("base64"), bytes.toString("base64url")]
})

const TEXT_FILE = /\.(md|ts|mts|js|mjs|cjs|json|ya?ml|sh|txt|env|example|sql|html)$/i
const MAX_FILE_BYTES = 4 * 1024 * 1024
const ROOT_FILES = ["README.md", "docker-compose.yml", "Dockerfile", "package.json"]
const ROOT_DIRS = ["docs", "scripts", "test", "src", "dist"]

/** The package root: this file is `src/Config/PublishedSecrets.ts` or `dist/Config/PublishedSecrets.js`. */
const packageRoot = () => path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** The shipped text files under `root` (relative paths), per the module comment. */
const shippedFiles = (root: string): Array<string> => {
  const found: Array<string> = ROOT_FILES.filter((f) => fs.existsSync(path.join(root, f)))
  const walk = (rel: string) => {
    let entries: Array<fs.Dirent>
    try {
      entries = fs.readdirSync(path.join(root, rel), { withFileTypes: true })
    } catch {
      return // not shipped here (dist/ in a checkout never built, test/ in the image)
    }
    for (const e of entries) {
      if (e.name.startsWith(".") || e.name === "node_modules") continue
      const child = path.join(rel, e.name)
      if (e.isDirectory()) walk(child)
      else if (e.isFile() && TEXT_FILE.test(e.name) && !e.name.endsWith(".d.ts")) found.push(child)
    }
  }
  for (const dir of ROOT_DIRS) walk(dir)
  return found
}

/**
 * The configured secrets that are published, each with where: a description of the committed value,
 * or the shipped file that holds it. Empty when none is.
 */
export const findPublished = (
  candidates: ReadonlyArray<Candidate>,
  root: string = packageRoot()
): Array<{ readonly name: string; readonly where: string }> => {
  const found: Array<{ name: string; where: string }> = []
  const rest: Array<Candidate> = []
  for (const c of candidates) {
    const where = PUBLISHED.get(createHash("sha256").update(c.bytes).digest("hex"))
    if (where !== undefined) found.push({ name: c.name, where: `it is ${where}, public in the repository's history` })
    else rest.push(c)
  }
  if (rest.length === 0) return found
  for (const file of shippedFiles(root)) {
    if (rest.length === 0) break
    let text: string
    try {
      if (fs.statSync(path.join(root, file)).size > MAX_FILE_BYTES) continue
      text = fs.readFileSync(path.join(root, file), "utf8")
    } catch {
      continue
    }
    for (let i = rest.length - 1; i >= 0; i--) {
      if (rest[i]!.spellings.some((s) => s.length > 0 && text.includes(s))) {
        found.push({ name: rest[i]!.name, where: `it appears in the repository's file ${file}` })
        rest.splice(i, 1)
      }
    }
  }
  return found
}
