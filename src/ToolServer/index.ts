/**
 * The customer tool SDK: what a tool server needs to accept the platform's signed invocations
 * (D10, contract 5) and to honour the write contract (4.1.2), and what a webhook receiver needs to
 * verify the platform's deliveries (D11: `verifyWebhook`).
 *
 * ```ts
 * const verifier = makeVerifier({
 *   jwksUrl: "https://platform.example/v1/tenants/ten_1/environments/production/jwks.json",
 *   issuer: "https://platform.example",
 *   tenantId: "ten_1",
 *   environment: "production"
 * })
 * const server = makeToolServer({
 *   verifier,
 *   publicBaseUrl: "https://tools.acme.com",
 *   operations: [
 *     defineOperation({ name: "create_refund", effect: "write", path: "/refunds/create",
 *       reconciliationPath: "/refunds/operations/{operation_id}", input, output,
 *       handler: (input, invocation) => ... })   // runs inside the operation's transaction
 *   ]
 * })
 * // node:http: createServer(yield* nodeListener(server)); run `ensureSchema` once at start.
 * ```
 */

/**
 * Invocation verification: `makeVerifier(config).verifyInvocation({ method, audience, headers,
 * rawBody })` checks the signature against the published key set, issuer, exact audience, expiry
 * (lifetime <= 60 s), `typ`, tenant, environment, actor, operation id, input digest and cell
 * generation; it fails with `InvocationRejected` (`code`, `message`, HTTP `status`).
 */
export {
  type Actor,
  inputDigest,
  type InvocationClaims,
  InvocationRejected,
  type InvocationRequest,
  makeVerifier,
  MAX_TOKEN_SECONDS,
  type RejectionCode,
  TOKEN_TYPE,
  type VerifiedInvocation,
  type Verifier,
  type VerifierConfig
} from "./Verify.js"

/**
 * Webhook verification: `verifyWebhook({ secrets, headers, rawBody })` checks a delivery's
 * Standard Webhooks signature (with `standardwebhooks`) and timestamp; it returns the event or fails
 * with `WebhookRejected`.
 */
export { verifyWebhook, type WebhookEvent, WebhookRejected, type WebhookRequest } from "./Webhooks.js"

/**
 * The write contract on Postgres (@effect/sql): `ensureSchema` creates `tool_operations`;
 * `runWrite(operationId, tool, write)` runs `write` at most once per operation id in one
 * transaction with its outcome; `reconcile(operationId)` answers reconciliation.
 */
export {
  ensureSchema,
  OperationConflict,
  reconcile,
  type Reconciliation,
  type ReconciliationStatus,
  runWrite,
  ToolFailure
} from "./WriteLedger.js"

/**
 * The server: `defineOperation` per operation, `makeToolServer` for the request handler
 * (framework-free), `nodeListener` to serve it with node:http.
 */
export {
  defineOperation,
  InvalidInput,
  InvalidJson,
  makeToolServer,
  nodeListener,
  type OperationDefinition,
  readRawBody,
  sendResponse,
  type ToolOperation,
  type ToolRequest,
  type ToolResponse,
  type ToolServer,
  type ToolServerConfig,
  toToolRequest
} from "./Server.js"
