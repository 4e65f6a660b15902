/**
 * Operator-tunable configuration, read once through Effect `Config` (environment variables by
 * default). Tests replace the whole layer with `Layer.succeed(AppConfig, ...)`.
 */
import { Config, ConfigError, Context, Either, Layer, Option, Redacted } from "effect"
import ipaddr from "ipaddr.js"

import { type Candidate, findPublished, keyCandidate, textCandidate } from "./PublishedSecrets.js"
import { defaultQuotaDefaults, type QuotaDefaults, quotaDefaultsConfig } from "./QuotaDefaults.js"

/**
 * `SECRETS_KEY`: 32 bytes as 64 hex characters or as base64 (standard or url-safe). Returns the
 * key bytes, or a message saying what is wrong (never the value).
 */
export const decodeSecretsKey = (value: string): Either.Either<Buffer, string> => {
  const text = value.trim()
  const bytes = /^[0-9a-fA-F]{64}$/.test(text)
    ? Buffer.from(text, "hex")
    : /^[A-Za-z0-9+/_-]+={0,2}$/.test(text)
    ? Buffer.from(text, "base64")
    : undefined
  if (bytes === undefined || bytes.length !== 32) {
    return Either.left(
      `SECRETS_KEY must be 32 bytes, given as 64 hex characters or as base64 (got ${
        bytes === undefined ? "neither hex nor base64" : `${bytes.length} bytes`
      })`
    )
  }
  return Either.right(bytes)
}

/** The shortest `OPERATOR_TOKEN` accepted (D20); a generated one is 46 characters. */
export const OPERATOR_TOKEN_MIN_LENGTH = 32

/** `OPERATOR_TOKEN` (from the environment or DATA_DIR/operator-token): a message saying why it is refused, if it is. */
export const operatorTokenProblem = (token: string): string | undefined =>
  token.length < OPERATOR_TOKEN_MIN_LENGTH
    ? `OPERATOR_TOKEN must be at least ${OPERATOR_TOKEN_MIN_LENGTH} characters (got ${token.length}); generate one with: openssl rand -hex 32`
    : undefined

/** The shortest `CLUSTER_SECRET` accepted, in bytes of its UTF-8 text (D20). */
export const CLUSTER_SECRET_MIN_BYTES = 32

/**
 * Whether `host` (RUNNER_HOST) is a loopback address: `localhost`, 127.0.0.0/8 or ::1 (an
 * IPv4-mapped ::ffff:127.x.y.z too). Only then may the runner port go without CLUSTER_SECRET.
 */
export const isLoopbackHost = (host: string): boolean => {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1")
  if (h === "localhost") return true
  if (!ipaddr.isValid(h)) return false
  const address = ipaddr.process(h) // an IPv4-mapped IPv6 address as its IPv4 address
  return address.range() === "loopback"
}

/**
 * The configured secrets that appear in the repository (D20: published secrets never run): a
 * config error naming the first, or the configuration as it is.
 */
const refusePublished = <A extends AppConfigShape>(config: A): Either.Either<A, ConfigError.ConfigError> => {
  const candidates: Array<Candidate> = []
  if (Option.isSome(config.operatorToken)) candidates.push(textCandidate("OPERATOR_TOKEN", Redacted.value(config.operatorToken.value)))
  if (Option.isSome(config.secretsKey)) {
    const text = Redacted.value(config.secretsKey.value)
    const bytes = decodeSecretsKey(text)
    if (Either.isRight(bytes)) candidates.push(keyCandidate("SECRETS_KEY", text, bytes.right))
  }
  if (Option.isSome(config.cluster.secret)) candidates.push(textCandidate("CLUSTER_SECRET", Redacted.value(config.cluster.secret.value)))
  if (candidates.length === 0) return Either.right(config)
  const published = findPublished(candidates)
  if (published.length === 0) return Either.right(config)
  const { name, where } = published[0]!
  return Either.left(ConfigError.InvalidData(
    [name],
    `${name} is a published secret: ${where}. Anyone can read it; set a new one (openssl rand -hex 32)`
  ))
}

/**
 * The model of the quickstart agent (D1): the `scripted` model unless `QUICKSTART_MODEL` names a
 * real provider (`openai:<model>` or `anthropic:<model>`); then that provider's key
 * (`OPENAI_API_KEY` / `ANTHROPIC_API_KEY`) is required, and is stored encrypted as the quickstart
 * model profile's credential.
 */
export type QuickstartModel =
  | { readonly provider: "scripted" }
  | { readonly provider: "openai" | "anthropic"; readonly model: string; readonly apiKey: Redacted.Redacted<string> }

const QUICKSTART_KEYS = { openai: "OPENAI_API_KEY", anthropic: "ANTHROPIC_API_KEY" } as const

/**
 * `QUICKSTART_MODEL` with the provider keys. Unset, empty or `scripted`: the scripted model. A
 * malformed value or a missing key is a config error naming the variable (never a key's value).
 */
export const parseQuickstartModel = (
  value: Option.Option<string>,
  keys: { readonly openai: Option.Option<Redacted.Redacted<string>>; readonly anthropic: Option.Option<Redacted.Redacted<string>> }
): Either.Either<QuickstartModel, ConfigError.ConfigError> => {
  const text = Option.getOrElse(value, () => "").trim()
  if (text === "" || text === "scripted") return Either.right({ provider: "scripted" })
  const cut = text.indexOf(":")
  const provider = cut < 0 ? "" : text.slice(0, cut)
  const model = cut < 0 ? "" : text.slice(cut + 1).trim()
  if ((provider !== "openai" && provider !== "anthropic") || model.length === 0 || model.length > 200) {
    return Either.left(ConfigError.InvalidData(
      ["QUICKSTART_MODEL"],
      `QUICKSTART_MODEL must be openai:<model> or anthropic:<model> (model: 1 to 200 characters), or unset ` +
        `for the scripted model; got ${JSON.stringify(text.slice(0, 100))}`
    ))
  }
  const apiKey = Option.filter(keys[provider], (k) => Redacted.value(k).trim().length > 0)
  if (Option.isNone(apiKey)) {
    return Either.left(ConfigError.MissingData(
      [QUICKSTART_KEYS[provider]],
      `${QUICKSTART_KEYS[provider]} is required: QUICKSTART_MODEL names the ${provider} provider`
    ))
  }
  return Either.right({ provider, model, apiKey: apiKey.value })
}

/**
 * The console's mail (issue 38): `SMTP_URL` (`smtp://user:pass@host:587`, `smtps://...`) sends
 * through that server; unset, each message is written to DATA_DIR/outbox/ and its path logged.
 * `MAIL_FROM` is the sender.
 */
export interface ConsoleConfig {
  readonly smtpUrl: Option.Option<Redacted.Redacted<string>>
  readonly mailFrom: string
}

export const defaultConsoleConfig: ConsoleConfig = { smtpUrl: Option.none(), mailFrom: "Agent Platform <console@localhost>" }

export interface AppConfigShape {
  readonly port: number
  readonly host: string
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: string
  readonly operatorToken: Option.Option<Redacted.Redacted<string>>
  readonly publicBaseUrl: Option.Option<string>
  /** AES-256-GCM key for credentials at rest; unset: generated once into DATA_DIR/secrets-key */
  readonly secretsKey: Option.Option<Redacted.Redacted<string>>
  /** the quickstart agent's model: QUICKSTART_MODEL, OPENAI_API_KEY, ANTHROPIC_API_KEY */
  readonly quickstartModel: QuickstartModel
  /** the console's mail (issue 38) */
  readonly console: ConsoleConfig
  /** cell resources */
  readonly rateLimit: { readonly ratePerSecond: number; readonly burst: number }
  readonly cellIdleTimeoutSeconds: number
  readonly dbPoolSize: number
  /** statements each Postgres connection keeps prepared (0: none), src/Database/Prepared.ts */
  readonly dbPreparedStatements: number
  /** how often the LISTEN connection is probed (a half-open connection is replaced), src/Database/Listener.ts */
  readonly dbListenProbeSeconds: number
  /**
   * DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS: Postgres ends a session idle inside a transaction this
   * long (0: never), so a hung node's row locks go with it (issue 41; src/Database/Client.ts)
   */
  readonly dbIdleInTransactionSeconds: number
  /** idempotency replay window (D5: 7 days) and tombstone retention (contract part 8: 90 days) */
  readonly idempotencyTtlSeconds: number
  readonly tombstoneTtlSeconds: number
  /** deletion purge: delay before live data is purged (contract 4 rule 6: within 24 h) and the sweep interval */
  readonly purgeDelaySeconds: number
  readonly sweepIntervalSeconds: number
  /** run time budgets (contract part 8; each at most its contract value) and cell run resources */
  readonly runs: RunConfig
  /** customer tools (D10): the invocation token issuer and life, the destination allowlist, timeouts */
  readonly tools: ToolConfig
  /** the HTTP edge: request limits, server timeouts, the rate limit of requests without a valid key (D19) */
  readonly edge: EdgeConfig
  /** webhook deliveries (D18, D20): how many are in flight, per process, endpoint and environment, their lease, the fallback poll */
  readonly webhooks: WebhookConfig
  /** schedules (D15): the scheduler's longest sleep (it wakes at the earliest next_run_at, at most this much later) */
  readonly schedules: ScheduleConfig
  /** quotas (D16): the limits of an environment no operator has set, per environment kind */
  readonly quotas: QuotaDefaults
  /** the cluster (issue 19): this node's runner address and the shard-lock timings */
  readonly cluster: ClusterConfig
  /** fair shares of the node between its cells (issue 36): capacities, cell weights, metric labels */
  readonly shares: ShareConfig
}

export interface ShareConfig {
  /** SHARE_STEP_CONCURRENCY: run steps (a model call and its commit) executing at once on this node */
  readonly stepConcurrency: number
  /** SHARE_OUTBOUND_CONCURRENCY: calls out (models, tools, webhooks, key sets) in flight at once on this node */
  readonly outboundConcurrency: number
  /** SHARE_BYTES_CONCURRENCY: file chunks (64 KiB-1 MiB) of uploads and downloads moving at once on this node */
  readonly bytesConcurrency: number
  /**
   * CELL_WEIGHTS: `tenant/environment=weight` pairs, comma-separated (e.g. `ten_a/production=4`): a
   * cell of weight 4 gets four turns for one of a cell of weight 1 when both wait; 1 unless set here
   * or by the operator API (which wins)
   */
  readonly cellWeights: ReadonlyMap<string, number>
  /** SHARE_SLICE_MILLIS: the longest the fair scheduler runs busy cells' work before the event loop polls I/O again */
  readonly sliceMillis: number
  /** SHARE_WEIGHTS_REFRESH_SECONDS: how often a node reads the weights operators set on other nodes */
  readonly weightsRefreshSeconds: number
  /** METRICS_CELL_LABELS: the shares' metrics carry a `cell` label (tenant ids in /metrics); off by default */
  readonly cellLabels: boolean
}

export interface ClusterConfig {
  /** RUNNER_HOST: how the other nodes reach this node's runner (default 127.0.0.1) */
  readonly runnerHost: string
  /**
   * CLUSTER_SECRET: the credential every node proves on the runner port (TLS with a key derived
   * from it, src/Runtime/RunnerTransport.ts); at least 32 bytes, the same on every node. Unset: the
   * runner port is plain TCP, allowed only when RUNNER_HOST is a loopback address (D20).
   */
  readonly secret: Option.Option<Redacted.Redacted<string>>
  /** RUNNER_PORT: the cluster transport's port; unset: a free port chosen at start (fine on one machine) */
  readonly runnerPort: Option.Option<number>
  /** CLUSTER_LOCK_REFRESH_SECONDS: how often a runner refreshes its shard locks (default 2) */
  readonly lockRefreshSeconds: number
  /**
   * CLUSTER_LOCK_EXPIRATION_SECONDS: a runner that has not renewed its shard leases for this long
   * (dead, or hung: issue 41) loses its shards to the others (default 6; at least twice the
   * refresh): about the time a dead or hung node's cells take to move, and the longest stall a
   * node survives without failing over
   */
  readonly lockExpirationSeconds: number
  /** CLUSTER_SEND_TIMEOUT_SECONDS: how long a request waits for its cell (e.g. moving) before 503 (default 10) */
  readonly sendTimeoutSeconds: number
  /** CLUSTER_SWEEP_SECONDS: how often a node wakes the cells it owns that have unfinished runs (default 10) */
  readonly sweepSeconds: number
}

export interface ScheduleConfig {
  /** the scheduler sleeps until the earliest due schedule, at most this long (a schedule made or changed elsewhere is seen within it) */
  readonly pollMillis: number
}

export interface WebhookConfig {
  /** deliveries in flight at once in this process */
  readonly concurrency: number
  /** deliveries in flight at once to one endpoint (every process's live leases counted when claiming) */
  readonly endpointConcurrency: number
  /**
   * deliveries in flight at once for one environment (cell; every process's live leases counted),
   * so one environment's slow or failing endpoints hold at most this many of a process's slots and
   * the others' deliveries find free ones (D20); keep it well below `concurrency`
   */
  readonly cellConcurrency: number
  /**
   * how long a claimed delivery is held: longer than an attempt (15 s) and its recording; past it,
   * an unrecorded attempt (its process died) counts as an unknown outcome and the delivery is sent again
   */
  readonly leaseSeconds: number
  /** LISTEN/NOTIFY wakes the workers at once; this slow poll is the fallback */
  readonly pollSeconds: number
}

export interface EdgeConfig {
  /** a JSON request body larger than this is 400 `body_too_large` (D19: at most 1 MiB) */
  readonly bodyLimitBytes: number
  /** `/v1` requests without a valid key, per client address (D19: 20/s, burst 40) */
  readonly clientRateLimit: { readonly ratePerSecond: number; readonly burst: number }
  /** a client must send its request headers within this (slow-header connections are closed) */
  readonly headersTimeoutSeconds: number
  /** ... and its whole request within this (responses, event streams included, are not limited) */
  readonly requestTimeoutSeconds: number
  /** an idle keep-alive connection is closed after this */
  readonly keepAliveTimeoutSeconds: number
  /** open connections at most (more are refused by the server) */
  readonly maxConnections: number
  /**
   * HTTP_DRAIN_SECONDS: on SIGTERM, `/readyz` answers 503 this long (a load balancer's window to
   * stop sending) while requests are still served; then the listener closes (issue 41)
   */
  readonly drainSeconds: number
  /**
   * SHUTDOWN_TIMEOUT_SECONDS: a stop (SIGTERM, SIGINT) that has not finished this long after the
   * signal exits the process with code 1 all the same: a database that stopped answering would
   * hold the in-flight requests and the cluster's leaving for good (issue 41)
   */
  readonly shutdownTimeoutSeconds: number
  /**
   * AUTH_CACHE_SECONDS: how long a process answers for a key it authenticated without reading it
   * again (0: every request reads its key). A revocation, a rotation's early expiry or a deletion
   * is told to every process at its commit (`auth_changed`), which forgets them all; this bounds
   * what a process that missed that notice (its LISTEN connection lost) still accepts (issue 37)
   */
  readonly authCacheSeconds: number
}

export interface ToolConfig {
  /** `iss` of invocation tokens: TOOL_TOKEN_ISSUER, else PUBLIC_BASE_URL, else http://HOST:PORT */
  readonly issuer: Option.Option<string>
  /** `exp - iat` of an invocation token (D10: at most 60 s) */
  readonly tokenSeconds: number
  /** DESTINATION_ALLOWLIST as given (hosts or CIDRs); empty by default */
  readonly destinationAllowlist: string
  /** one tool HTTP call, connect to last byte */
  readonly requestTimeoutSeconds: number
  /** while a write's outcome is `pending` at the customer, reconciliation asks again this often */
  readonly reconcilePollSeconds: number
  /** a write left `outcome_unknown` is reconciled again in the background this often */
  readonly reconcileRetrySeconds: number
  /**
   * The clock tolerance customer tools are assumed to check `exp` with (the ToolServer kit's: 5 s)
   * plus the skew between nodes: a write's `not_found` is final only this long after its token expired.
   */
  readonly clockToleranceSeconds: number
}

export interface RunConfig {
  readonly startDeadlineSeconds: number
  readonly executionSeconds: number
  readonly authorizationSeconds: number
  readonly approvalSeconds: number
  /** runs of one cell executing at once; the others wait (within their start deadline) */
  readonly maxActiveRunsPerCell: number
  /** model calls one run may make */
  readonly maxSteps: number
  /** SSE: open streams per cell and per actor (contract part 8), ping interval, revocation check interval */
  readonly streamsPerCell: number
  readonly streamsPerActor: number
  readonly pingSeconds: number
  readonly streamAuthCheckSeconds: number
  /** the conversation a model step is sent: its latest items up to this many bytes of JSON */
  readonly contextBytes: number
}

const bounded = (name: string, fallback: number, max: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be an integer from 1 to ${max}`, validation: (n) => n >= 1 && n <= max })
  )

export const defaultRunConfig: RunConfig = {
  startDeadlineSeconds: 300,
  executionSeconds: 300,
  authorizationSeconds: 900,
  approvalSeconds: 600,
  maxActiveRunsPerCell: 64,
  maxSteps: 32,
  streamsPerCell: 128,
  streamsPerActor: 16,
  pingSeconds: 15,
  streamAuthCheckSeconds: 5,
  contextBytes: 600_000
}

export const defaultEdgeConfig: EdgeConfig = {
  bodyLimitBytes: 1024 * 1024,
  clientRateLimit: { ratePerSecond: 20, burst: 40 },
  headersTimeoutSeconds: 10,
  requestTimeoutSeconds: 30,
  keepAliveTimeoutSeconds: 5,
  maxConnections: 20_000,
  drainSeconds: 2,
  shutdownTimeoutSeconds: 45,
  authCacheSeconds: 5
}

const positive = (name: string, fallback: number) =>
  Config.number(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be a number > 0`, validation: (n) => Number.isFinite(n) && n > 0 })
  )

export const defaultWebhookConfig: WebhookConfig = {
  concurrency: 32,
  endpointConcurrency: 4,
  cellConcurrency: 8,
  leaseSeconds: 60,
  pollSeconds: 30
}

export const defaultScheduleConfig: ScheduleConfig = { pollMillis: 1000 }

export const defaultShareConfig: ShareConfig = {
  stepConcurrency: 16,
  outboundConcurrency: 256,
  bytesConcurrency: 8,
  cellWeights: new Map(),
  weightsRefreshSeconds: 10,
  sliceMillis: 2,
  cellLabels: false
}

/** CELL_WEIGHTS: `tenant/environment=weight,...` (weights > 0, at most 1000). */
export const parseCellWeights = (text: string): Either.Either<ReadonlyMap<string, number>, string> => {
  const weights = new Map<string, number>()
  for (const part of text.split(",").map((p) => p.trim()).filter((p) => p.length > 0)) {
    const match = /^([A-Za-z0-9_-]+\/[A-Za-z0-9_-]+)\s*=\s*(\d+(?:\.\d+)?)$/.exec(part)
    const weight = match === null ? NaN : Number(match[2])
    if (match === null || !(weight > 0 && weight <= 1000)) {
      return Either.left(`CELL_WEIGHTS: ${JSON.stringify(part)} is not tenant/environment=weight (a number > 0, at most 1000)`)
    }
    weights.set(match[1]!, weight)
  }
  return Either.right(weights)
}

export const defaultClusterConfig: ClusterConfig = {
  runnerHost: "127.0.0.1",
  secret: Option.none(),
  runnerPort: Option.none(),
  lockRefreshSeconds: 2,
  lockExpirationSeconds: 6,
  sendTimeoutSeconds: 10,
  sweepSeconds: 10
}

export const defaultToolConfig: ToolConfig = {
  issuer: Option.none(),
  tokenSeconds: 60,
  destinationAllowlist: "",
  requestTimeoutSeconds: 30,
  reconcilePollSeconds: 5,
  reconcileRetrySeconds: 60,
  clockToleranceSeconds: 10
}

export class AppConfig extends Context.Tag("AppConfig")<AppConfig, AppConfigShape>() {
  static readonly config = Config.all({
    port: Config.port("PORT").pipe(Config.withDefault(8080)),
    host: Config.string("HOST").pipe(Config.withDefault("127.0.0.1")),
    databaseUrl: Config.option(Config.redacted("DATABASE_URL")).pipe(
      Config.map(Option.filter((u) => Redacted.value(u).length > 0))
    ),
    dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./.data")),
    // Checked here (D20): a short token stops the start with a clear message.
    operatorToken: Config.option(Config.redacted("OPERATOR_TOKEN")).pipe(
      Config.map(Option.filter((u) => Redacted.value(u).length > 0)),
      Config.mapOrFail((token) => {
        const problem = Option.isSome(token) ? operatorTokenProblem(Redacted.value(token.value)) : undefined
        return problem === undefined ? Either.right(token) : Either.left(ConfigError.InvalidData(["OPERATOR_TOKEN"], problem))
      })
    ),
    publicBaseUrl: Config.option(Config.string("PUBLIC_BASE_URL")),
    console: Config.all({
      smtpUrl: Config.option(Config.redacted("SMTP_URL")).pipe(Config.map(Option.filter((u) => Redacted.value(u).length > 0))),
      mailFrom: Config.string("MAIL_FROM").pipe(Config.withDefault(defaultConsoleConfig.mailFrom))
    }),
    // Checked here, so a key of the wrong length stops the process at start with a clear message.
    secretsKey: Config.option(Config.redacted("SECRETS_KEY")).pipe(
      Config.map(Option.filter((k) => Redacted.value(k).trim().length > 0)),
      Config.mapOrFail((key) =>
        Option.match(key, {
          onNone: () => Either.right(key),
          onSome: (k) =>
            Either.mapBoth(decodeSecretsKey(Redacted.value(k)), {
              onLeft: (message) => ConfigError.InvalidData(["SECRETS_KEY"], message),
              onRight: () => key
            })
        })
      )
    ),
    // Checked here, so a malformed QUICKSTART_MODEL or a missing provider key stops the start.
    quickstartModel: Config.all({
      model: Config.option(Config.string("QUICKSTART_MODEL")),
      openai: Config.option(Config.redacted("OPENAI_API_KEY")),
      anthropic: Config.option(Config.redacted("ANTHROPIC_API_KEY"))
    }).pipe(Config.mapOrFail(({ model, ...keys }) => parseQuickstartModel(model, keys))),
    // Checked here, at start: a cell's limiter refuses (dies on) a policy outside these bounds,
    // which would turn every /v1 request into a 500.
    rateLimit: Config.all({
      ratePerSecond: Config.number("CELL_RATE_LIMIT_RPS").pipe(
        Config.withDefault(60),
        Config.validate({ message: "CELL_RATE_LIMIT_RPS must be a number > 0", validation: (n) => Number.isFinite(n) && n > 0 })
      ),
      burst: Config.integer("CELL_RATE_LIMIT_BURST").pipe(
        Config.withDefault(120),
        Config.validate({ message: "CELL_RATE_LIMIT_BURST must be at least 1", validation: (n) => n >= 1 })
      )
    }),
    cellIdleTimeoutSeconds: Config.integer("CELL_IDLE_TIMEOUT_SECONDS").pipe(
      Config.withDefault(600),
      Config.validate({ message: "CELL_IDLE_TIMEOUT_SECONDS must be at least 1", validation: (n) => n >= 1 })
    ),
    // At least 3: migrations hold their advisory lock on one reserved connection and migrate on
    // another, and the cluster runner holds its shard locks on one for good.
    dbPoolSize: Config.integer("DB_POOL_SIZE").pipe(
      Config.withDefault(20),
      Config.validate({ message: "DB_POOL_SIZE must be at least 3", validation: (n) => n >= 3 })
    ),
    dbPreparedStatements: Config.integer("DB_PREPARED_STATEMENTS").pipe(
      Config.withDefault(200),
      Config.validate({ message: "DB_PREPARED_STATEMENTS must be at least 0", validation: (n) => n >= 0 })
    ),
    dbListenProbeSeconds: Config.integer("DB_LISTEN_PROBE_SECONDS").pipe(
      Config.withDefault(15),
      Config.validate({ message: "DB_LISTEN_PROBE_SECONDS must be at least 1", validation: (n) => n >= 1 })
    ),
    dbIdleInTransactionSeconds: Config.integer("DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS").pipe(
      Config.withDefault(6),
      Config.validate({ message: "DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS must be at least 0", validation: (n) => n >= 0 })
    ),
    idempotencyTtlSeconds: Config.integer("IDEMPOTENCY_TTL_SECONDS").pipe(Config.withDefault(7 * 24 * 3600)),
    tombstoneTtlSeconds: Config.integer("TOMBSTONE_TTL_SECONDS").pipe(Config.withDefault(90 * 24 * 3600)),
    purgeDelaySeconds: Config.integer("PURGE_DELAY_SECONDS").pipe(Config.withDefault(3600)),
    sweepIntervalSeconds: Config.integer("SWEEP_INTERVAL_SECONDS").pipe(Config.withDefault(60)),
    runs: Config.all({
      startDeadlineSeconds: bounded("RUN_START_DEADLINE_SECONDS", 300, 300),
      executionSeconds: bounded("RUN_EXECUTION_SECONDS", 300, 300),
      authorizationSeconds: bounded("RUN_AUTHORIZATION_SECONDS", 900, 900),
      approvalSeconds: bounded("APPROVAL_SECONDS", 600, 600),
      maxActiveRunsPerCell: bounded("CELL_MAX_ACTIVE_RUNS", 64, 10_000),
      maxSteps: bounded("RUN_MAX_STEPS", 32, 1000),
      streamsPerCell: bounded("CELL_MAX_STREAMS", 128, 128),
      streamsPerActor: bounded("ACTOR_MAX_STREAMS", 16, 16),
      pingSeconds: bounded("SSE_PING_SECONDS", 15, 15),
      streamAuthCheckSeconds: bounded("SSE_AUTH_CHECK_SECONDS", 5, 15),
      contextBytes: bounded("MODEL_CONTEXT_BYTES", 600_000, 100_000_000)
    }),
    tools: Config.all({
      issuer: Config.option(Config.string("TOOL_TOKEN_ISSUER")).pipe(Config.map(Option.filter((s) => s.length > 0))),
      tokenSeconds: bounded("TOOL_TOKEN_SECONDS", 60, 60),
      destinationAllowlist: Config.string("DESTINATION_ALLOWLIST").pipe(Config.withDefault("")),
      requestTimeoutSeconds: bounded("TOOL_REQUEST_TIMEOUT_SECONDS", 30, 300),
      reconcilePollSeconds: bounded("RECONCILE_POLL_SECONDS", 5, 300),
      reconcileRetrySeconds: bounded("RECONCILE_RETRY_SECONDS", 60, 86_400),
      clockToleranceSeconds: bounded("TOOL_CLOCK_TOLERANCE_SECONDS", 10, 300)
    }),
    edge: Config.all({
      bodyLimitBytes: bounded("REQUEST_BODY_LIMIT_BYTES", 1024 * 1024, 1024 * 1024),
      clientRateLimit: Config.all({
        ratePerSecond: positive("UNAUTHENTICATED_RATE_LIMIT_RPS", 20),
        burst: bounded("UNAUTHENTICATED_RATE_LIMIT_BURST", 40, 1_000_000)
      }),
      headersTimeoutSeconds: bounded("HTTP_HEADERS_TIMEOUT_SECONDS", 10, 3600),
      requestTimeoutSeconds: bounded("HTTP_REQUEST_TIMEOUT_SECONDS", 30, 3600),
      keepAliveTimeoutSeconds: bounded("HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", 5, 3600),
      maxConnections: bounded("HTTP_MAX_CONNECTIONS", 20_000, 1_000_000),
      drainSeconds: Config.integer("HTTP_DRAIN_SECONDS").pipe(
        Config.withDefault(2),
        Config.validate({ message: "HTTP_DRAIN_SECONDS must be an integer from 0 to 300", validation: (n) => n >= 0 && n <= 300 })
      ),
      shutdownTimeoutSeconds: bounded("SHUTDOWN_TIMEOUT_SECONDS", 45, 3600),
      authCacheSeconds: Config.integer("AUTH_CACHE_SECONDS").pipe(
        Config.withDefault(5),
        Config.validate({ message: "AUTH_CACHE_SECONDS must be an integer from 0 to 60", validation: (n) => n >= 0 && n <= 60 })
      )
    }),
    webhooks: Config.all({
      concurrency: bounded("WEBHOOK_CONCURRENCY", 32, 10_000),
      endpointConcurrency: bounded("WEBHOOK_ENDPOINT_CONCURRENCY", 4, 1000),
      cellConcurrency: bounded("WEBHOOK_CELL_CONCURRENCY", 8, 10_000),
      leaseSeconds: bounded("WEBHOOK_LEASE_SECONDS", 60, 86_400).pipe(
        Config.validate({ message: "WEBHOOK_LEASE_SECONDS must be at least 16 (an attempt takes up to 15 s)", validation: (n) => n >= 16 })
      ),
      pollSeconds: bounded("WEBHOOK_POLL_SECONDS", 30, 3600)
    }),
    schedules: Config.all({
      pollMillis: bounded("SCHEDULER_POLL_MILLIS", 1000, 60_000)
    }),
    quotas: quotaDefaultsConfig,
    shares: Config.all({
      stepConcurrency: bounded("SHARE_STEP_CONCURRENCY", 16, 10_000),
      outboundConcurrency: bounded("SHARE_OUTBOUND_CONCURRENCY", 256, 100_000),
      bytesConcurrency: bounded("SHARE_BYTES_CONCURRENCY", 8, 10_000),
      cellWeights: Config.string("CELL_WEIGHTS").pipe(
        Config.withDefault(""),
        Config.mapOrFail((text) => Either.mapLeft(parseCellWeights(text), (message) => ConfigError.InvalidData(["CELL_WEIGHTS"], message)))
      ),
      weightsRefreshSeconds: bounded("SHARE_WEIGHTS_REFRESH_SECONDS", 10, 3600),
      sliceMillis: bounded("SHARE_SLICE_MILLIS", 2, 1000),
      cellLabels: Config.boolean("METRICS_CELL_LABELS").pipe(Config.withDefault(false))
    }),
    cluster: Config.all({
      runnerHost: Config.string("RUNNER_HOST").pipe(Config.withDefault("127.0.0.1")),
      secret: Config.option(Config.redacted("CLUSTER_SECRET")).pipe(
        Config.map(Option.filter((s) => Redacted.value(s).length > 0)),
        Config.mapOrFail((secret) =>
          Option.isSome(secret) && Buffer.byteLength(Redacted.value(secret.value), "utf8") < CLUSTER_SECRET_MIN_BYTES
            ? Either.left(ConfigError.InvalidData(
              ["CLUSTER_SECRET"],
              `CLUSTER_SECRET must be at least ${CLUSTER_SECRET_MIN_BYTES} bytes (the same on every node); generate one with: openssl rand -hex 32`
            ))
            : Either.right(secret)
        )
      ),
      runnerPort: Config.option(Config.port("RUNNER_PORT")),
      lockRefreshSeconds: bounded("CLUSTER_LOCK_REFRESH_SECONDS", 2, 60),
      lockExpirationSeconds: bounded("CLUSTER_LOCK_EXPIRATION_SECONDS", 6, 600),
      sendTimeoutSeconds: bounded("CLUSTER_SEND_TIMEOUT_SECONDS", 10, 120),
      sweepSeconds: bounded("CLUSTER_SWEEP_SECONDS", 10, 3600)
    }).pipe(
      Config.validate({
        message: "CLUSTER_LOCK_EXPIRATION_SECONDS must be at least twice CLUSTER_LOCK_REFRESH_SECONDS",
        validation: (c) => c.lockExpirationSeconds >= 2 * c.lockRefreshSeconds
      }),
      // D20: nodes trust only nodes. A runner port reachable from elsewhere needs the credential.
      Config.mapOrFail((c) =>
        Option.isNone(c.secret) && !isLoopbackHost(c.runnerHost)
          ? Either.left(ConfigError.InvalidData(
            ["CLUSTER_SECRET"],
            `CLUSTER_SECRET is required: RUNNER_HOST ${JSON.stringify(c.runnerHost)} is not a loopback address, and without ` +
              `it anyone who reaches the runner port could command this node's cells. Set the same CLUSTER_SECRET (at least ` +
              `${CLUSTER_SECRET_MIN_BYTES} bytes: openssl rand -hex 32) on every node`
          ))
          : Either.right(c)
      )
    )
  }).pipe(
    // Last, once each value is known good: a secret that appears in the repository is refused (D20).
    Config.mapOrFail(refusePublished)
  )

  static readonly layer = Layer.effect(AppConfig, AppConfig.config)

  /** Defaults for tests and tools: the same values an unconfigured process gets. */
  static readonly defaults = (overrides: Partial<AppConfigShape> = {}): AppConfigShape => ({
    port: 0,
    host: "127.0.0.1",
    databaseUrl: Option.none(),
    dataDir: "./.data",
    operatorToken: Option.none(),
    publicBaseUrl: Option.none(),
    secretsKey: Option.none(),
    quickstartModel: { provider: "scripted" },
    console: defaultConsoleConfig,
    rateLimit: { ratePerSecond: 60, burst: 120 },
    cellIdleTimeoutSeconds: 600,
    dbPoolSize: 10,
    dbPreparedStatements: 200,
    dbListenProbeSeconds: 15,
    dbIdleInTransactionSeconds: 6,
    idempotencyTtlSeconds: 7 * 24 * 3600,
    tombstoneTtlSeconds: 90 * 24 * 3600,
    purgeDelaySeconds: 3600,
    sweepIntervalSeconds: 60,
    runs: defaultRunConfig,
    tools: defaultToolConfig,
    edge: defaultEdgeConfig,
    webhooks: defaultWebhookConfig,
    schedules: defaultScheduleConfig,
    quotas: defaultQuotaDefaults,
    cluster: defaultClusterConfig,
    shares: defaultShareConfig,
    ...overrides
  })
}
