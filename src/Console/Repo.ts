/** SQL of the console (issue 38): accounts, sessions, links, recovery codes, sign-in failures, organizations. */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"

import * as Rows from "../Database/Rows.js"

export const AccountRow = Schema.Struct({
  id: Schema.String,
  email: Schema.String,
  password_hash: Schema.String,
  verified_at: Rows.TimeOrNull,
  totp_secret: Schema.NullOr(Schema.String),
  totp_enrolled_at: Rows.TimeOrNull,
  organization_id: Schema.NullOr(Schema.String),
  /** a customer's member, or an operator (issue 39): a session opens only its own kind's pages */
  kind: Schema.Literal("member", "operator"),
  created_at: Rows.Time
})
export type AccountRow = typeof AccountRow.Type

export const SessionRow = Schema.Struct({
  account_id: Schema.String,
  password_at: Rows.Time,
  mfa_at: Rows.TimeOrNull,
  expires_at: Rows.Time
})
export type SessionRow = typeof SessionRow.Type

export const LinkRow = Schema.Struct({
  purpose: Schema.Literal("verify", "reset", "invite"),
  account_id: Schema.NullOr(Schema.String),
  organization_id: Schema.NullOr(Schema.String),
  email: Schema.String,
  expires_at: Rows.Time,
  used_at: Rows.TimeOrNull
})
export type LinkRow = typeof LinkRow.Type

export const OrganizationRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  pilot_application_id: Schema.NullOr(Schema.String),
  created_at: Rows.Time
})
export type OrganizationRow = typeof OrganizationRow.Type

export const OperatorTokenRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  prefix: Schema.String,
  created_at: Rows.Time,
  last_used_at: Rows.TimeOrNull,
  revoked_at: Rows.TimeOrNull
})
export type OperatorTokenRow = typeof OperatorTokenRow.Type

const TokenAccountRow = Schema.Struct({ id: Schema.String, account_id: Schema.String })

export class ConsoleRepo extends Effect.Service<ConsoleRepo>()("ConsoleRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The key of every node: the first start stores one, the others read it. */
    const signingKey = (candidate: Buffer) =>
      sql`INSERT INTO console_signing_key (id, key) VALUES (1, ${candidate}) ON CONFLICT (id) DO NOTHING`.pipe(
        Effect.zipRight(sql`SELECT key FROM console_signing_key WHERE id = 1`.pipe(Rows.single(Schema.Struct({ key: Rows.Bytes })))),
        Effect.map((r) => Buffer.from(r.key))
      )

    /** A new account; undefined when the address has one already. */
    const insertAccount = (a: { id: string; email: string; passwordHash: string; at: Date }) =>
      sql`INSERT INTO console_accounts (id, email, password_hash, created_at)
          VALUES (${a.id}, ${a.email}, ${a.passwordHash}, ${a.at})
          ON CONFLICT (email) DO NOTHING RETURNING *`.pipe(Rows.maybe(AccountRow))

    /** An operator's account (issue 39), its address verified by whoever runs the CLI; undefined when the address has an account. */
    const insertOperator = (a: { id: string; email: string; passwordHash: string; at: Date }) =>
      sql`INSERT INTO console_accounts (id, email, password_hash, verified_at, kind, created_at)
          VALUES (${a.id}, ${a.email}, ${a.passwordHash}, ${a.at}, 'operator', ${a.at})
          ON CONFLICT (email) DO NOTHING RETURNING *`.pipe(Rows.maybe(AccountRow))

    /** The cell of a connection (its review's audit entry goes there). */
    const connectionCell = (id: string) =>
      sql`SELECT tenant_id, environment FROM connections WHERE id = ${id}`.pipe(
        Rows.single(Schema.Struct({ tenant_id: Schema.String, environment: Schema.Literal("sandbox", "production") }))
      )

    const account = (id: string) => sql`SELECT * FROM console_accounts WHERE id = ${id}`.pipe(Rows.maybe(AccountRow))
    const accountByEmail = (email: string) => sql`SELECT * FROM console_accounts WHERE email = ${email}`.pipe(Rows.maybe(AccountRow))

    const markVerified = (id: string, at: Date) =>
      sql`UPDATE console_accounts SET verified_at = coalesce(verified_at, ${at}) WHERE id = ${id}`.pipe(Rows.none)

    const setPassword = (id: string, passwordHash: string) =>
      sql`UPDATE console_accounts SET password_hash = ${passwordHash} WHERE id = ${id}`.pipe(Rows.none)

    /** The secret being enrolled (replaced until enrolment is confirmed; never once it is). */
    const setPendingTotp = (id: string, sealed: string) =>
      sql`UPDATE console_accounts SET totp_secret = ${sealed}
          WHERE id = ${id} AND totp_enrolled_at IS NULL`.pipe(Rows.none)

    const confirmTotp = (id: string, codeHashes: ReadonlyArray<Buffer>, at: Date) =>
      Effect.all([
        sql`UPDATE console_accounts SET totp_enrolled_at = ${at} WHERE id = ${id} AND totp_enrolled_at IS NULL`,
        sql`DELETE FROM console_recovery_codes WHERE account_id = ${id}`,
        ...codeHashes.map((h) => sql`INSERT INTO console_recovery_codes (account_id, code_hash) VALUES (${id}, ${h})`)
      ], { discard: true })

    /** Spends a TOTP code's time step: false when this step (or a later one) was spent already. */
    const useTotpStep = (id: string, step: number) =>
      sql`UPDATE console_accounts SET totp_last_step = ${step}
          WHERE id = ${id} AND (totp_last_step IS NULL OR totp_last_step < ${step}) RETURNING id`
        .pipe(Effect.map((rows) => rows.length === 1))

    /** Spends a recovery code: whether it was one of the account's, unused. */
    const useRecoveryCode = (id: string, codeHash: Buffer, at: Date) =>
      sql`UPDATE console_recovery_codes SET used_at = ${at}
          WHERE account_id = ${id} AND code_hash = ${codeHash} AND used_at IS NULL RETURNING account_id`
        .pipe(Effect.map((rows) => rows.length === 1))

    const insertSession = (s: { tokenHash: Buffer; accountId: string; at: Date; expiresAt: Date }) =>
      sql`INSERT INTO console_sessions (token_hash, account_id, password_at, expires_at)
          VALUES (${s.tokenHash}, ${s.accountId}, ${s.at}, ${s.expiresAt})`.pipe(Rows.none)

    const session = (tokenHash: Buffer, at: Date) =>
      sql`SELECT account_id, password_at, mfa_at, expires_at FROM console_sessions
          WHERE token_hash = ${tokenHash} AND expires_at > ${at}`.pipe(Rows.maybe(SessionRow))

    const markMfa = (tokenHash: Buffer, at: Date) =>
      sql`UPDATE console_sessions SET mfa_at = ${at} WHERE token_hash = ${tokenHash}`.pipe(Rows.none)

    const deleteSession = (tokenHash: Buffer) => sql`DELETE FROM console_sessions WHERE token_hash = ${tokenHash}`.pipe(Rows.none)

    /** Every session of the account (a password reset signs it out everywhere). */
    const deleteSessionsOf = (accountId: string) => sql`DELETE FROM console_sessions WHERE account_id = ${accountId}`.pipe(Rows.none)

    const insertLink = (l: {
      tokenHash: Buffer
      purpose: LinkRow["purpose"]
      accountId: string | null
      organizationId: string | null
      email: string
      expiresAt: Date
    }) =>
      sql`INSERT INTO console_links (token_hash, purpose, account_id, organization_id, email, expires_at)
          VALUES (${l.tokenHash}, ${l.purpose}, ${l.accountId}, ${l.organizationId}, ${l.email}, ${l.expiresAt})`.pipe(Rows.none)

    /** Marks a link used, once: the row as it was before, or undefined for a link used already or none. */
    const useLink = (tokenHash: Buffer, at: Date) =>
      sql`UPDATE console_links SET used_at = ${at} WHERE token_hash = ${tokenHash} AND used_at IS NULL
          RETURNING purpose, account_id, organization_id, email, expires_at, used_at`.pipe(Rows.maybe(LinkRow))

    const link = (tokenHash: Buffer) =>
      sql`SELECT purpose, account_id, organization_id, email, expires_at, used_at FROM console_links
          WHERE token_hash = ${tokenHash}`.pipe(Rows.maybe(LinkRow))

    const recordFailure = (subjects: ReadonlyArray<string>, at: Date) =>
      Effect.forEach(subjects, (s) => sql`INSERT INTO console_sign_in_failures (subject, at) VALUES (${s}, ${at})`, { discard: true })

    /** Failures of each subject since `since` (and those older are forgotten). */
    const failures = (subjects: ReadonlyArray<string>, since: Date) =>
      sql`DELETE FROM console_sign_in_failures WHERE at < ${since}`.pipe(
        Effect.zipRight(
          sql`SELECT subject, count(*)::int AS n FROM console_sign_in_failures
              WHERE subject IN ${sql.in(subjects)} AND at >= ${since} GROUP BY subject`
            .pipe(Rows.all(Schema.Struct({ subject: Schema.String, n: Schema.Number })))
        )
      )

    const insertOrganization = (o: { id: string; name: string; accountId: string; at: Date }) =>
      Effect.all([
        sql`INSERT INTO console_organizations (id, name, created_at) VALUES (${o.id}, ${o.name}, ${o.at})`,
        sql`UPDATE console_accounts SET organization_id = ${o.id} WHERE id = ${o.accountId}`
      ], { discard: true })

    const organization = (id: string) => sql`SELECT * FROM console_organizations WHERE id = ${id}`.pipe(Rows.maybe(OrganizationRow))

    const joinOrganization = (accountId: string, organizationId: string) =>
      sql`UPDATE console_accounts SET organization_id = ${organizationId} WHERE id = ${accountId} AND organization_id IS NULL`
        .pipe(Rows.none)

    const setApplication = (organizationId: string, applicationId: string) =>
      sql`UPDATE console_organizations SET pilot_application_id = ${applicationId}
          WHERE id = ${organizationId} AND pilot_application_id IS NULL`.pipe(Rows.none)

    /** The sandbox's provisioning state (`provisioning`, `ready`, ...), if the tenant has one. */
    const sandboxState = (tenantId: string) =>
      sql`SELECT state FROM environments WHERE tenant_id = ${tenantId} AND name = 'sandbox'`.pipe(
        Rows.maybe(Schema.Struct({ state: Schema.String })),
        Effect.map((r) => r?.state)
      )

    /** Whether the tenant has a run that ended `succeeded` (onboarding is complete then, not before). */
    const hasSucceededRun = (tenantId: string) =>
      sql`SELECT EXISTS (SELECT 1 FROM runs WHERE tenant_id = ${tenantId} AND status = 'succeeded') AS found`.pipe(
        Rows.single(Schema.Struct({ found: Schema.Boolean })),
        Effect.map((r) => r.found)
      )

    const insertOperatorToken = (t: { id: string; accountId: string; name: string; prefix: string; tokenHash: Buffer; at: Date }) =>
      sql`INSERT INTO operator_tokens (id, account_id, name, prefix, token_hash, created_at)
          VALUES (${t.id}, ${t.accountId}, ${t.name}, ${t.prefix}, ${t.tokenHash}, ${t.at})`.pipe(Rows.none)

    const operatorTokens = (accountId: string) =>
      sql`SELECT id, name, prefix, created_at, last_used_at, revoked_at FROM operator_tokens
          WHERE account_id = ${accountId} ORDER BY created_at DESC, id`.pipe(Rows.all(OperatorTokenRow))

    /** Revokes the account's token; false when it has no such live token. */
    const revokeOperatorToken = (accountId: string, id: string, at: Date) =>
      sql`UPDATE operator_tokens SET revoked_at = ${at}
          WHERE id = ${id} AND account_id = ${accountId} AND revoked_at IS NULL RETURNING id`.pipe(
        Rows.maybe(Schema.Struct({ id: Schema.String })),
        Effect.map((r) => r !== undefined)
      )

    /**
     * The operator account a live token acts for (its account still an operator's, TOTP enrolled),
     * its use stamped at most once a minute; undefined for any other token. One statement.
     */
    const operatorOfToken = (tokenHash: Buffer, at: Date) =>
      sql`WITH live AS (
            SELECT t.id, t.account_id, t.last_used_at FROM operator_tokens t JOIN console_accounts a ON a.id = t.account_id
            WHERE t.token_hash = ${tokenHash} AND t.revoked_at IS NULL AND a.kind = 'operator' AND a.totp_enrolled_at IS NOT NULL
          ), stamped AS (
            UPDATE operator_tokens t SET last_used_at = ${at} FROM live
            WHERE t.id = live.id AND (live.last_used_at IS NULL OR live.last_used_at < ${new Date(at.getTime() - 60_000)})
          )
          SELECT id, account_id FROM live`.pipe(Rows.maybe(TokenAccountRow))

    return {
      insertOperatorToken,
      operatorTokens,
      revokeOperatorToken,
      operatorOfToken,
      signingKey,
      insertAccount,
      insertOperator,
      connectionCell,
      account,
      accountByEmail,
      markVerified,
      setPassword,
      setPendingTotp,
      confirmTotp,
      useRecoveryCode,
      useTotpStep,
      insertSession,
      session,
      markMfa,
      deleteSession,
      deleteSessionsOf,
      insertLink,
      useLink,
      link,
      recordFailure,
      failures,
      insertOrganization,
      organization,
      joinOrganization,
      setApplication,
      sandboxState,
      hasSucceededRun
    } as const
  })
}) {}
